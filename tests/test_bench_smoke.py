"""Smoke tests of bench/: every suite runs at toy sizes, the results file, and the generated report.

Speed itself is never asserted here (that is what bench/ measures): only that the runner
starts its subprocesses, collects positive finite figures with the load beside them,
merges them into the results file, and that the generator keeps the hand-written analysis.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
from suites import SUITES  # noqa: E402

sys.path.remove(str(BENCH))
#: workloads each suite's smoke run times (every one when a suite is not listed): the rest
#: repeat these ones' code paths at the cost of more compiling
SMOKE = {
    "peers": ["w1_add256", "w2_sample32", "w2_rss", "w4_windows"],
    "tf": ["tf_add"],
    "jax_core": ["j1"],
    "frames_compressed": ["fc_add", "fc_sample32"],  # fc_rss fills each buffer again in a process of its own
    "writers": ["learner_alone", "add_1w_1r", "learner_1w_1r"],  # tiny: 1 writer, 1 row per add
    "ray_shards": ["add_1s", "add_actors_1s", "get_next_1s", "dataset_1s"],  # tiny: 1 shard
    "sb3": ["sb3_add", "sb3_sample256", "sb3_dqn_cartpole"],  # Atari: a CnnPolicy; RSS: three more processes
    "jax_gpu": ["jg_j2b", "jg_j3"],
    "sequences": ["seq_uniform", "seq_add", "seqf_period40"],  # the other variants: the same fills, other keywords
    "sample_rules": ["rules_epoch", "rules_consume"],  # the others: the same fill, other keywords
    "rllib": ["rllib_add_50k", "rllib_sample32", "rllib_bytes"],  # rllib_dqn: two DQN algorithms built
}
#: suites whose jobs run only in a venv the Makefile builds (not --here): suite -> that venv
MAKEFILE_VENV = {"rllib": ".venv-rllib"}


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        import report
        import results
        import runner
        import suites

        yield runner, report, results, suites
    finally:
        sys.path.remove(str(BENCH))


def _smoke_jobs(suites, name):
    """The jobs of the main environment, or the first job (run here, what its environment adds missing)."""
    jobs = suites.load(name).JOBS
    return [job.name for job in jobs if job.env is None] or [jobs[0].name]


@pytest.fixture(scope="module")
def smoke(bench, tmp_path_factory):
    """``smoke(name)``: suite ``name``'s tiny run, started once per module (the suite-specific
    tests below check the same run): its workload keys, results file and report."""
    runner, _, _, suites = bench
    runs = {}

    def run(name):
        if name not in runs:
            keys = SMOKE.get(name, [w.key for w in suites.load(name).WORKLOADS])
            venv = MAKEFILE_VENV.get(name)
            if venv and not (BENCH.parent / venv / "bin" / "python").exists():
                pytest.skip(f"the {name} suite runs in {venv} (make test)")
            folder = tmp_path_factory.mktemp(f"smoke-{name}")
            here = [] if venv else ["--here"]
            argv = [name, "--tiny", *here, "--libs", ",".join(_smoke_jobs(suites, name))]
            argv += ["--workloads", ",".join(keys), "--results", str(folder), "--out", str(folder / "bench.md")]
            assert runner.main(argv + ["--readme", ""]) == 0
            runs[name] = keys, json.loads((folder / f"{name}.json").read_text()), (folder / "bench.md").read_text()
        return runs[name]

    return run


@pytest.mark.parametrize("name", SUITES)
def test_every_suite_runs_at_tiny_sizes_and_records_the_load(smoke, name):
    keys, data, table = smoke(name)
    figures = {(r["workload"], r["lib"]): r for r in data["records"] if "value" in r}
    for key in keys:
        assert (key, "replaybuf") in figures, f"no replaybuf figure for {key}: {data['records']}"
    for rec in figures.values():
        assert math.isfinite(rec["value"]) and rec["value"] > 0
        assert rec["load1"] >= 0 and rec["runnable"] >= 1
    (run,) = data["runs"]
    assert run["size"] == "tiny" and "--tiny" in run["command"] and len(run["load_start"]) == 2
    assert f"Suite `{name}`" in table


def test_w2_is_timed_beside_its_random_gather_floor(smoke):
    _, data, table = smoke("peers")
    libs = {r["lib"] for r in data["records"] if "value" in r and r["workload"] == "w2_sample32"}
    assert {"replaybuf", "gather-floor", "numpy-memcpy", "numpy-take"} <= libs
    assert "| peers | W2 sample 32 x 84x84x4 uint8 | >= 0.9x gather-floor |" in table


def _record(workload, lib, value, **extra):
    return {"workload": workload, "lib": lib, "value": value, "load1": 1.0, "runnable": 2, **extra}


def _run(command="python -m bench peers"):
    return {"command": command, "date": "d", "machine": "m", "size": "tiny", "rounds": 1, "load_start": [0, 1]}


def test_a_new_run_replaces_only_the_workloads_it_measured(bench, tmp_path):
    _, _, results, _ = bench
    path = tmp_path / "peers.json"
    first = [_record("w1_add1", "replaybuf", 1.0), _record("w1_add1", "cpprb", 2.0), _record("w4_windows", "x", 3.0)]
    results.merge(path, {"run": dict(_run(), load_end=[0, 1]), "records": first})
    merged = results.merge(
        path, {"run": dict(_run("again"), load_end=[0, 1]), "records": [_record("w1_add1", "replaybuf", 5.0)]}
    )
    got = {(r["workload"], r["lib"]): (r["value"], r["run"]) for r in merged["records"]}
    assert got == {("w1_add1", "replaybuf"): (5.0, 2), ("w4_windows", "x"): (3.0, 1)}
    assert [run["id"] for run in merged["runs"]] == [1, 2]


def test_generating_twice_keeps_the_hand_written_analysis(bench, tmp_path, monkeypatch):
    _, report, results, _ = bench
    analysis = tmp_path / "analysis"
    analysis.mkdir()
    note = "## What bounds W2\n\nMeasured by hand: the copy of random rows.\n"
    (analysis / "10-w2.md").write_text(note)
    monkeypatch.setattr(report, "ANALYSIS", analysis)
    results.merge(
        tmp_path / "res" / "peers.json",
        {"run": dict(_run(), load_end=[0, 1]), "records": [_record("w1_sample256", "replaybuf", 7.0)]},
    )
    doc, readme = tmp_path / "benchmarks.md", tmp_path / "README.md"
    start, end = report.README_TABLE
    readme.write_text(f"# r\n\n{start}\nold table\n{end}\n\nafter\n")

    report.generate(tmp_path / "res", doc, readme)
    first = doc.read_text()
    report.generate(tmp_path / "res", doc, readme)
    assert doc.read_text() == first
    assert (analysis / "10-w2.md").read_text() == note
    assert first.count("Measured by hand: the copy of random rows.") == 1
    assert first.index("## Targets") < first.index("## What bounds W2") < first.index("## All figures")
    assert "old table" not in readme.read_text() and "| sample 256 small transitions of 200k | 7 batches/s" in (
        readme.read_text()
    )
    assert readme.read_text().endswith(f"{end}\n\nafter\n")


def test_a_section_written_into_the_report_by_hand_is_moved_into_the_analysis(bench, tmp_path, monkeypatch):
    _, report, _, _ = bench
    monkeypatch.setattr(report, "ANALYSIS", tmp_path / "analysis")
    doc = tmp_path / "benchmarks.md"
    report.generate(tmp_path / "res", doc)
    doc.write_text(doc.read_text() + "\n## SB3's DQN loop\n\nsteps/s by hand\n")

    report.generate(tmp_path / "res", doc)
    (saved,) = (tmp_path / "analysis").iterdir()
    assert saved.name == "90-sb3-s-dqn-loop.md" and saved.read_text() == "## SB3's DQN loop\n\nsteps/s by hand\n"
    text = doc.read_text()
    assert text.count("steps/s by hand") == 1 and "included from bench/analysis/90-sb3-s-dqn-loop.md" in text
    report.generate(tmp_path / "res", doc)
    assert len(list((tmp_path / "analysis").iterdir())) == 1


def test_unknown_suite_is_refused(bench, tmp_path):
    runner, *_ = bench
    with pytest.raises(SystemExit):
        runner.main(["nosuchsuite", "--tiny", "--results", str(tmp_path), "--out", ""])


def test_an_unknown_job_is_refused(bench, tmp_path):
    runner, *_ = bench
    with pytest.raises(SystemExit):
        runner.main(["peers", "--tiny", "--libs", "numpy", "--results", str(tmp_path), "--out", ""])


def test_a_crashing_worker_is_reported_not_raised(bench, tmp_path):
    runner, *_ = bench
    with open(tmp_path / "log.txt", "w") as log:
        records, failure = runner.run_job(sys.executable, ["peers", "no_such_job", "tiny"], 60, log)
    assert records == []
    assert "exited with 1" in failure and "no job 'no_such_job'" in failure


def _tiny(runner, tmp_path, suite, *extra):
    """Run ``suite`` at tiny size here; its records with a figure, by (workload, label), and the report."""
    argv = [suite, "--tiny", "--here", *extra, "--results", str(tmp_path), "--out", str(tmp_path / "bench.md")]
    assert runner.main(argv + ["--readme", ""]) == 0
    records = json.loads((tmp_path / f"{suite}.json").read_text())["records"]
    return records, (tmp_path / "bench.md").read_text()


def test_the_gpu_suite_records_its_device_and_the_bare_loop_beside_every_sample(smoke):
    _, data, table = smoke("gpu")  # its main-environment job: replaybuf, every workload
    records = data["records"]
    figures = {(r["workload"], r["lib"]): r for r in records if "value" in r}
    for key in ("gpu_frames32", "gpu_frames256", "gpu_sample256"):
        assert {(key, "replaybuf"), (key, "replaybuf captured"), (key, "bare loop")} <= set(figures)
    per = {("gpu_per256", "replaybuf"), ("gpu_per256_numpy", "replaybuf"), ("gpu_per256_numpy", "numpy prioritized")}
    assert per <= set(figures)
    for key, record in figures.items():  # no GPU in the tests' process; prioritized rounds in CPU time
        assert record["note"] == "CPU, 1 torch thread" + (", thread CPU time" if key in per else "")
    missing = {(r["workload"], r["lib"]): r["missing"] for r in records if "missing" in r}
    assert missing[("gpu_sample256", "kernel alone")] == "a CUDA graph: none on the cpu"
    assert "| gpu | sample 256 small transitions on the device | >= 0.67x bare loop |" in table
    assert "| gpu | prioritized sample 256 + update 256, torch beside NumPy (1M capacity) | >= 0.77x numpy" in table


def test_the_jax_gpu_suite_times_the_prioritized_rows_beside_the_uniform_sample(smoke):
    _, data, table = smoke("jax_gpu")
    assert {r["lib"] for r in data["records"] if "value" in r and r["workload"] == "jg_j3"} == {
        "replaybuf",
        "uniform pairs",
    }
    assert "| jax_gpu | J3 prioritized sample 256 + update | >= 0.5x uniform pairs |" in table


def test_the_her_suite_times_the_relabelled_sample_beside_its_floor_and_sb3(smoke):
    _, data, table = smoke("her")  # its one job, every workload
    figures = {(r["workload"], r["lib"]) for r in data["records"] if "value" in r}
    assert {("her_sample256", label) for label in ("replaybuf", "no-her floor", "stable-baselines3")} <= figures
    assert {("her_sb3_sample256", "replaybuf"), ("her_sb3_sample256", "stable-baselines3")} <= figures
    assert ">= 3x stable-baselines3" in table and ">= 1.5x cpprb" in table


def test_a_job_runs_only_for_the_workloads_it_measures(bench, tmp_path):
    """sb3's DQN and RSS jobs start no process when only the buffers' workloads are asked for."""
    runner, *_ = bench
    records, _ = _tiny(runner, tmp_path, "sb3", "--workloads", "sb3_add")
    assert {(r.get("workload"), r["lib"]) for r in records if "value" in r} == {
        ("sb3_add", "replaybuf"),
        ("sb3_add", "stable-baselines3"),
    }
