"""TF-Agents 0.19.0's example training scripts, run briefly from the installed wheel with
replaybuf's TFUniformReplayBuffer in place of TF-Agents' (conftest.py): DQN on CartPole and
the PPO clip agent (on CartPole: its default HalfCheetah needs MuJoCo). They must train
without error, and the buffer they filled must be ours."""

from __future__ import annotations

import sys

import pytest
from absl import flags
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.system import multiprocessing

from replaybuf.tf_agents import tf_uniform_replay_buffer as ours


@pytest.fixture
def built(monkeypatch):
    """The buffers the script builds: our class, recorded."""
    buffers = []

    class Recorded(ours.TFUniformReplayBuffer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            buffers.append(self)

    monkeypatch.setattr(tf_uniform_replay_buffer, "TFUniformReplayBuffer", Recorded)
    return buffers


@pytest.fixture(autouse=True)
def example_flags():
    """Each example script defines absl flags of the same names (root_dir, ...): drop those
    of the scripts imported by earlier tests so the next one can define its own."""
    for module in list(flags.FLAGS.flags_by_module_dict()):
        if module.startswith("tf_agents.agents.") and ".examples." in module:
            for flag in flags.FLAGS.flags_by_module_dict()[module]:
                if flag.name in flags.FLAGS:
                    delattr(flags.FLAGS, flag.name)
            sys.modules.pop(module, None)


def test_dqn_cartpole_trains_with_our_buffer(tmp_path, built):
    from tf_agents.agents.dqn.examples.v2 import train_eval

    loss = train_eval.train_eval(
        str(tmp_path), num_iterations=20, initial_collect_steps=64, num_eval_episodes=1, eval_interval=10
    )
    assert float(loss.loss) > 0.0
    (buffer,) = built
    assert int(buffer.num_frames()) >= 64 + 20  # initial collection, then steps of every iteration


def test_dqn_rnn_masked_cartpole_trains_with_our_buffer(tmp_path, built):
    from tf_agents.agents.dqn.examples.v2 import train_eval

    loss = train_eval.train_eval(
        str(tmp_path),
        env_name="MaskedCartPole-v0",
        train_sequence_length=2,
        initial_collect_steps=10,
        num_eval_episodes=1,
        num_iterations=2,
    )
    assert float(loss.loss) > 0.0
    assert len(built) == 1 and int(built[0].num_frames()) > 0


def test_ppo_clip_agent_trains_with_our_buffer(tmp_path, built):
    """The issue's crash: PPO's collect_data_spec comes out of a tf.Module attribute, wrapped
    in TensorFlow's tracking wrappers, and so do the items it adds."""
    from tf_agents.agents.ppo.examples.v2 import train_eval_clip_agent
    from tf_agents.environments import suite_gym

    multiprocessing.enable_interactive_mode()
    train_eval_clip_agent.train_eval(
        str(tmp_path),
        env_name="CartPole-v0",
        env_load_fn=suite_gym.load,
        num_environment_steps=300,
        collect_episodes_per_iteration=2,
        num_parallel_environments=2,
        num_epochs=2,
        num_eval_episodes=1,
        eval_interval=1000,
        actor_fc_layers=(16,),
        value_fc_layers=(16,),
    )
    (buffer,) = built
    assert type(buffer.data_spec).__name__ == "Trajectory"  # the spec as given, unwrapped
    # every iteration collects, trains on gather_all() and clears: at least two did
    assert int(buffer._store.clears.numpy()) >= 2
