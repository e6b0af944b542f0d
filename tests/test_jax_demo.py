"""The JAX demo (``replaybuf demo --backend jax``) on tiny budgets: the loop runs as one
compiled scan per chunk, fills each agent's buffer with exactly what it collected, learns
(a finite TD loss that moves), keeps vmapped agents apart, and the command writes its plot.
The full "solves CartPole-v1" run is recorded in docs/demo.md, not asserted here."""

from __future__ import annotations

import contextlib
import io
import math
import re

import jax
import numpy as np
import pytest

from replaybuf.agents import jax_dqn
from replaybuf.cli import main
from replaybuf.jax import make_buffer

TINY = jax_dqn.JaxDqnConfig(
    seeds=2,
    total_steps=2_000,
    chunk_steps=1_000,
    num_envs=4,
    buffer_size=800,
    batch_size=32,
    learning_starts=400,
    target_every=100,
    eval_episodes=3,
    hidden=(16, 16),
)


@pytest.fixture(scope="module")
def tiny():
    """TINY's ``init`` and ``chunk``, and the vmapped chunk jitted with its carry donated: one
    object for the module, so XLA compiles it once (the tests below run and inspect it)."""
    init, chunk, _ = jax_dqn._builders(TINY)
    return init, chunk, jax.jit(jax.vmap(chunk), donate_argnums=0)


def _carry(init):
    """Fresh agents' carry (jitted: leaves in buffers of their own, which donation needs)."""
    return jax.jit(jax.vmap(init))(jax.random.split(jax.random.key(0), TINY.seeds))


def test_a_chunk_collects_adds_and_learns_per_agent(tiny):
    init, _, run = tiny
    carry = _carry(init)
    first = jax.tree.map(np.asarray, carry.params)
    carry, figures = run(carry)
    updates = TINY.chunk_steps // TINY.num_envs
    np.testing.assert_array_equal(np.asarray(carry.step), [TINY.chunk_steps] * TINY.seeds)
    np.testing.assert_array_equal(np.asarray(carry.buffer.steps), [updates] * TINY.seeds)  # one row per update
    assert np.isfinite(np.asarray(figures["loss"])).all() and (np.asarray(figures["loss"]) > 0).all()
    moved = jax.tree.map(lambda a, b: np.abs(np.asarray(a) - b).max(), carry.params, first)
    assert max(jax.tree.leaves(moved)) > 0  # the Adam steps changed the network
    params = jax.tree.leaves(carry.params)
    assert not np.allclose(params[0][0], params[0][1])  # the two agents are apart
    # what was added is the agents' own transitions: CartPole rewards are 1
    core = make_buffer(jax_dqn._transition_spec((4,)), TINY.num_envs, TINY.buffer_size // TINY.num_envs)
    stored = jax.vmap(core.stored)(carry.buffer)
    rewards = np.asarray(stored[sorted(jax_dqn._transition_spec((4,))).index("reward")])  # leaves in key order
    assert rewards.shape == (TINY.seeds, TINY.buffer_size // TINY.num_envs, TINY.num_envs)
    assert set(np.unique(rewards)) == {1.0}


def test_a_chunk_is_one_scan_carrying_the_buffer(tiny):
    """Collect, add, sample and train all run inside the chunk's one ``lax.scan`` (what is
    outside it only averages the figures), and the buffer travels in its carry."""
    init, chunk, _ = tiny
    carry = _carry(init)
    jaxpr = jax.make_jaxpr(jax.vmap(chunk))(carry).jaxpr
    scans = [eqn for eqn in jaxpr.eqns if eqn.primitive.name == "scan"]
    assert len(scans) == 1 and scans[0].params["length"] == TINY.chunk_steps // TINY.num_envs
    outside = {eqn.primitive.name for eqn in jaxpr.eqns} - {"scan"}
    assert not outside & {"dot_general", "random_bits", "scatter", "dynamic_update_slice", "gather"}, outside
    carried = [var.aval.shape for var in scans[0].outvars]
    assert carry.buffer.rows.shape in carried


def test_the_compiled_chunk_copies_no_buffer_storage(tiny):
    """The chunk runs with its carry donated and the write before the read (add_and_sample):
    XLA updates every agent's buffer in place. Without donation it must copy them."""
    init, chunk, donated = tiny
    carry = _carry(init)
    storage = rf"\[{TINY.seeds},{TINY.buffer_size // TINY.num_envs},{TINY.num_envs}(,\d+)*\]\S* copy\("

    def copies(jitted) -> list[str]:
        text = jitted.lower(carry).compile().as_text()
        return [line for line in text.splitlines() if re.search(storage, line)]

    assert copies(donated) == []  # the executable the test above runs
    assert copies(jax.jit(jax.vmap(chunk))), "the check must see the copies XLA makes without donation"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One run of the command for the three tests below (each run compiles its own chunk):
    2 agents, a step count that is no whole vectorised step, and a --min-return no agent
    reaches. Its exit code, stdout, stderr and output folder."""
    out = tmp_path_factory.mktemp("jax-demo")
    argv = ["demo", "--backend", "jax", "--steps", "1995", "--seeds", "2", "--eval-episodes", "2"]
    argv += ["--out", str(out), "--seed", "5", "--min-return", "1000"]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    return code, stdout.getvalue(), stderr.getvalue(), out


def test_the_command_trains_vmapped_agents_and_writes_the_plot(demo):
    _, out, _, folder = demo
    returns = re.search(r"greedy return per agent, best network kept \(2 fresh episodes each\): (\S+) (\S+)\n", out)
    assert returns and all(1 <= float(r) <= 500 for r in returns.groups())
    assert math.isfinite(float(re.search(r"final loss: (\S+)", out).group(1)))
    plot = folder / "dqn_CartPole-v1_jax_seed5x2.png"
    assert plot.exists() and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_unmet_min_return_fails_the_jax_demo(demo):
    code, _, err, _ = demo
    assert code == 1
    assert "below --min-return 1000" in err


@pytest.mark.parametrize("seeds", [0, -1])
def test_a_bad_seed_count_is_refused(tmp_path, seeds, capsys):
    assert main(["demo", "--backend", "jax", "--seeds", str(seeds), "--out", str(tmp_path)]) == 2
    assert f"seeds: expected a positive int, got {seeds}" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["jax", "numpy"])
@pytest.mark.parametrize(("flag", "name"), [("--eval-episodes", "eval_episodes"), ("--steps", "steps")])
def test_a_non_positive_count_is_refused_before_training(tmp_path, backend, flag, name, capsys):
    assert main(["demo", "--backend", backend, flag, "0", "--out", str(tmp_path)]) == 2
    assert f"{name}: expected a positive int" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing trained, nothing written


def test_steps_are_rounded_up_to_whole_vectorised_steps(demo):
    assert "env steps: 2000 per agent x 2 agents" in demo[1]  # 200 steps of the 10 envs, not 199.5
