"""The JAX demo (``replaybuf demo --backend jax``) on tiny budgets: the loop runs as one
compiled scan per chunk, fills each agent's buffer with exactly what it collected, learns
(a finite TD loss that moves), keeps vmapped agents apart, and the command writes its plot.
The full "solves CartPole-v1" run is recorded in docs/demo.md, not asserted here."""

from __future__ import annotations

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


def test_a_chunk_collects_adds_and_learns_per_agent():
    init, chunk, _ = jax_dqn._builders(TINY)
    carry = jax.jit(jax.vmap(init))(jax.random.split(jax.random.key(0), TINY.seeds))
    first = jax.tree.map(np.asarray, carry.params)
    run = jax.jit(jax.vmap(chunk), donate_argnums=0)
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


def test_a_chunk_is_one_scan_carrying_the_buffer():
    """Collect, add, sample and train all run inside the chunk's one ``lax.scan`` (what is
    outside it only averages the figures), and the buffer travels in its carry."""
    init, chunk, _ = jax_dqn._builders(TINY)
    carry = jax.vmap(init)(jax.random.split(jax.random.key(0), TINY.seeds))
    jaxpr = jax.make_jaxpr(jax.vmap(chunk))(carry).jaxpr
    scans = [eqn for eqn in jaxpr.eqns if eqn.primitive.name == "scan"]
    assert len(scans) == 1 and scans[0].params["length"] == TINY.chunk_steps // TINY.num_envs
    outside = {eqn.primitive.name for eqn in jaxpr.eqns} - {"scan"}
    assert not outside & {"dot_general", "random_bits", "scatter", "dynamic_update_slice", "gather"}, outside
    carried = [var.aval.shape for var in scans[0].outvars]
    assert carry.buffer.rows.shape in carried


def test_the_compiled_chunk_copies_no_buffer_storage():
    """The chunk runs with its carry donated and the write before the read (add_and_sample):
    XLA updates every agent's buffer in place. Without donation it must copy them."""
    init, chunk, _ = jax_dqn._builders(TINY)
    carry = jax.vmap(init)(jax.random.split(jax.random.key(0), TINY.seeds))
    storage = rf"\[{TINY.seeds},{TINY.buffer_size // TINY.num_envs},{TINY.num_envs}(,\d+)*\]\S* copy\("

    def copies(donate: tuple) -> list[str]:
        text = jax.jit(jax.vmap(chunk), donate_argnums=donate).lower(carry).compile().as_text()
        return [line for line in text.splitlines() if re.search(storage, line)]

    assert copies((0,)) == []
    assert copies(()), "the check must see the copies XLA makes without donation"


def test_the_command_trains_vmapped_agents_and_writes_the_plot(tmp_path, capsys):
    argv = [
        "demo",
        "--backend",
        "jax",
        "--steps",
        "2000",
        "--seeds",
        "2",
        "--eval-episodes",
        "2",
        "--out",
        str(tmp_path),
        "--seed",
        "5",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    returns = re.search(r"greedy return per agent, best network kept \(2 fresh episodes each\): (\S+) (\S+)\n", out)
    assert returns and all(1 <= float(r) <= 500 for r in returns.groups())
    assert math.isfinite(float(re.search(r"final loss: (\S+)", out).group(1)))
    plot = tmp_path / "dqn_CartPole-v1_jax_seed5x2.png"
    assert plot.exists() and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_unmet_min_return_fails_the_jax_demo(tmp_path, capsys):
    argv = [
        "demo",
        "--backend",
        "jax",
        "--steps",
        "1000",
        "--seeds",
        "1",
        "--eval-episodes",
        "1",
        "--out",
        str(tmp_path),
        "--min-return",
        "1000",
    ]
    assert main(argv) == 1
    assert "below --min-return 1000" in capsys.readouterr().err


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


def test_steps_are_rounded_up_to_whole_vectorised_steps(tmp_path, capsys):
    argv = ["demo", "--backend", "jax", "--steps", "15", "--seeds", "1", "--eval-episodes", "1", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert "env steps: 20 per agent x 1 agents" in capsys.readouterr().out  # 2 steps of the 10 envs
