"""The DQN agent, the ``replaybuf demo`` command and the examples, on tiny budgets.

The full-length "solves CartPole" run is an acceptance run recorded in docs/demo.md, not
a test: here the demo must train (a finite loss), evaluate and write its PNG.
"""

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from replaybuf import ArgumentError, BoundedArraySpec, UniformReplayBuffer
from replaybuf.agents import DqnAgent, loop
from replaybuf.cli import main
from replaybuf.trajectory import StepType, Trajectory, collect_data_spec

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--steps", "600", "--eval-episodes", "2"]


def test_demo_trains_and_writes_the_plot(tmp_path, capsys):
    assert main(["demo", *TINY, "--seed", "3", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    loss = float(re.search(r"final loss: (\S+)", out).group(1))
    assert math.isfinite(loss)
    assert re.search(r"mean greedy return over 2 episodes: [0-9.]+", out)
    plot = Path(re.search(r"learning curve: (.+)", out).group(1).strip())
    assert plot.parent == tmp_path and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_with_the_torch_backend_and_an_unmet_min_return(tmp_path, capsys):
    argv = ["demo", *TINY, "--backend", "torch", "--out", str(tmp_path), "--min-return", "1000"]
    assert main(argv) == 1  # CartPole returns at most 500
    out, err = capsys.readouterr()
    assert math.isfinite(float(re.search(r"final loss: (\S+)", out).group(1)))
    assert "below --min-return 1000" in err


def test_unavailable_backend_fails_with_a_clear_message(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(loop.BACKENDS, "tf", ("replaybuf.not_written_yet", "TFUniformReplayBuffer"))
    assert main(["demo", *TINY, "--backend", "tf", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "replaybuf.not_written_yet.TFUniformReplayBuffer" in err and "--backend numpy" in err


def test_make_buffer_rejects_unknown_backend():
    spec = collect_data_spec(_cartpole())
    with pytest.raises(ArgumentError, match="backend: expected one of"):
        loop.make_buffer("mxnet", spec, 1, 10)
    assert isinstance(loop.make_buffer("numpy", spec, 2, 10), UniformReplayBuffer)


def test_unknown_backend_is_a_usage_error():
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--backend", "mxnet"])
    assert exit_info.value.code == 2


def _cartpole():
    import gymnasium as gym

    return gym.make("CartPole-v1")


def _windows(step_type, reward, discount, next_obs):
    n = len(step_type)
    observation = np.stack([np.zeros((n, 4)), np.tile(next_obs, (n, 1))], axis=1).astype(np.float32)
    pair = lambda x, dtype: np.stack([x, x], axis=1).astype(dtype)  # noqa: E731
    return Trajectory(
        pair(step_type, np.int32),
        observation,
        np.zeros((n, 2), np.int64),
        (),
        np.full((n, 2), StepType.MID, np.int32),
        pair(reward, np.float32),
        pair(discount, np.float32),
    )


def _agent(**kwargs):
    spec = collect_data_spec(_cartpole())
    return DqnAgent(spec.observation, spec.action, hidden=(8,), seed=0, **kwargs)


def _q0(agent):
    with torch.no_grad():
        return float(agent.q_network(torch.zeros(1, 4))[0, 0])


def test_dqn_masks_boundary_windows():
    agent = _agent(learning_rate=0.0)
    boundary = _windows([StepType.LAST] * 4, [100.0] * 4, [1.0] * 4, np.ones(4))
    assert agent.train(boundary) == 0.0  # every window masked: nothing to learn
    mixed = _windows([StepType.MID, StepType.LAST], [1.0, 1000.0], [0.0, 0.0], np.ones(4))
    q0 = _q0(agent)
    expected = abs(1.0 - q0) - 0.5 if abs(1.0 - q0) > 1 else 0.5 * (1.0 - q0) ** 2
    assert agent.train(mixed) == pytest.approx(expected, rel=1e-5)  # only the MID window counts


def test_dqn_target_uses_discount_and_target_network():
    agent = _agent(learning_rate=0.0, gamma=0.5)
    with torch.no_grad():
        for p in agent.target_network.parameters():
            p.zero_()
        agent.target_network[-1].bias.copy_(torch.tensor([3.0, 7.0]))  # max next Q = 7
    q0 = _q0(agent)
    for discount in (0.0, 1.0):
        error = abs(2.0 + 0.5 * discount * 7.0 - q0)
        expected = error - 0.5 if error > 1 else 0.5 * error**2
        loss = agent.train(_windows([StepType.MID], [2.0], [discount], np.ones(4)))
        assert loss == pytest.approx(expected, rel=1e-5)


def test_double_q_values_the_q_networks_action_with_the_target_network():
    for double_q, expected in ((True, 2.0), (False, 4.0)):
        agent = _agent(learning_rate=0.0, gamma=0.5, double_q=double_q)
        with torch.no_grad():
            for p in [*agent.q_network.parameters(), *agent.target_network.parameters()]:
                p.zero_()
            agent.q_network[-1].bias.copy_(torch.tensor([1.0, 0.0]))  # prefers action 0
            agent.target_network[-1].bias.copy_(torch.tensor([3.0, 7.0]))
        # q = 1; target = 2 + 0.5 * 3 (double) or 2 + 0.5 * 7; Huber of 2.5 or 4.5
        loss = agent.train(_windows([StepType.MID], [2.0], [1.0], np.ones(4)))
        assert loss == pytest.approx(expected)


def test_gradients_are_clipped_to_max_grad_norm():
    agent = _agent(max_grad_norm=0.01)
    agent.train(_windows([StepType.MID] * 4, [100.0] * 4, [1.0] * 4, np.ones(4)))
    norm = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in agent.q_network.parameters()]))
    assert float(norm) == pytest.approx(0.01, rel=1e-4)


def test_dqn_learns_a_constant_target_and_syncs_the_target_network():
    agent = _agent(learning_rate=0.05, target_update_period=5)
    batch = _windows([StepType.MID] * 8, [1.0] * 8, [0.0] * 8, np.ones(4))
    losses = [agent.train(batch) for _ in range(60)]
    assert losses[-1] < 0.05 * losses[0]
    for online, target in zip(agent.q_network.parameters(), agent.target_network.parameters(), strict=True):
        assert torch.equal(online, target)  # 60 is a multiple of the period


def test_dqn_policies_and_bad_input():
    agent = _agent()
    observation = np.zeros((5, 4), np.float32)
    assert agent.greedy_policy(observation).shape == (5,)
    agent.epsilon = 1.0
    actions = {int(a) for _ in range(20) for a in agent.collect_policy(observation)}
    assert actions == {0, 1}
    with pytest.raises(ArgumentError, match=r"\[B, 2\]"):
        agent.train(_windows([StepType.MID], [1.0], [1.0], np.ones(4))._replace(step_type=np.zeros((1, 3))))
    with pytest.raises(ArgumentError, match="action_spec"):
        DqnAgent(
            BoundedArraySpec((4,), np.float32, None, -1, 1),
            BoundedArraySpec((2,), np.float32, None, -1, 1),
        )


def _run_example(*args):
    result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_dqn_cartpole_example_runs():
    out = _run_example(
        "examples/dqn_cartpole.py",
        "--total-steps",
        "600",
        "--learning-starts",
        "300",
        "--eval-every",
        "600",
    )
    assert math.isfinite(float(re.search(r"final loss (\S+)", out).group(1)))
    assert "mean greedy return over 20 fresh episodes" in out


def test_tf_agents_tutorial_example_runs():
    out = _run_example("examples/tf_agents_tutorial.py")
    assert "train step 9: loss" in out
    assert "observation=(4, 2, 4)" in out and "ids shape: (4, 2)" in out
