"""Run one of TF-Agents' example training scripts with TF-Agents' buffer or with replaybuf's.

    .venv-tf-agents/bin/python tests/tf_agents_suite/compare_example.py dqn replaybuf 10000 1

Arguments: the agent (``dqn``: agents/dqn/examples/v2/train_eval.py on CartPole-v0;
``reinforce``: agents/reinforce/examples/v2/train_eval.py on CartPole-v0; ``ddpg`` and
``sac``: their examples/v2/train_eval.py on Pendulum-v1, evaluated every quarter; ``ppo``:
agents/ppo/examples/v2/train_eval_clip_agent.py on CartPole-v0 with 4 parallel environments,
iterations counting environment steps), the buffer
(``tf-agents`` or ``replaybuf``: the import swapped as tests/tf_agents_suite/conftest.py does),
the iterations and a seed for ``tf.random.set_seed``. It prints the evaluations the script
makes (average return of 10 episodes, at the start, halfway and at the end for DQN; every
quarter for REINFORCE, DDPG and SAC; every 500 train steps for PPO) and the wall time.
docs/tf_agents.md quotes its runs.
"""

import importlib
import sys
import tempfile
import time

import tensorflow as tf
from tf_agents.replay_buffers import tf_uniform_replay_buffer


def record_evals(metric_utils, evals: list) -> None:
    """Append ``(train step, average return)`` to ``evals`` on every evaluation a script makes
    through ``metric_utils.eager_compute`` (DQN and PPO report no callback of their own)."""
    compute = metric_utils.eager_compute

    def recorded(*args, **kwargs):
        results = compute(*args, **kwargs)
        evals.append((int(kwargs["train_step"].numpy()), round(float(results["AverageReturn"]), 1)))
        return results

    metric_utils.eager_compute = recorded


def main(agent: str, which: str, iterations: int, seed: int) -> None:
    if which == "replaybuf":
        from replaybuf.tf_agents import tf_uniform_replay_buffer as ours

        tf_uniform_replay_buffer.TFUniformReplayBuffer = ours.TFUniformReplayBuffer
    elif which != "tf-agents":
        raise SystemExit(f"buffer: expected tf-agents or replaybuf, got {which!r}")
    evals = []
    root = tempfile.mkdtemp(prefix=f"{agent}_{which}_")
    tf.random.set_seed(seed)
    start = time.time()
    if agent == "dqn":
        from tf_agents.agents.dqn.examples.v2 import train_eval

        record_evals(train_eval.metric_utils, evals)
        never = 10**9
        train_eval.train_eval(
            root,
            num_iterations=iterations,
            eval_interval=iterations // 2,
            num_eval_episodes=10,
            log_interval=never,
            summary_interval=never,
            train_checkpoint_interval=never,
            policy_checkpoint_interval=never,
            rb_checkpoint_interval=never,
        )
    elif agent == "reinforce":
        from tf_agents.agents.reinforce.examples.v2 import train_eval

        def record(results, step):
            evals.append((int(step), round(float(results["AverageReturn"]), 1)))

        train_eval.train_eval(
            root,
            num_iterations=iterations,
            eval_interval=iterations // 4,
            num_eval_episodes=10,
            eval_metrics_callback=record,
        )
    elif agent in ("ddpg", "sac"):  # their MuJoCo default is not installed: Pendulum-v1 through suite_gym
        from tf_agents.environments import suite_gym

        train_eval = importlib.import_module(f"tf_agents.agents.{agent}.examples.v2.train_eval")

        def record(results, step):
            evals.append((int(step), round(float(results["AverageReturn"]), 1)))

        never = 10**9
        extra = {}
        if agent == "sac":  # (its defaults: 10k initial steps and a 1M buffer, sized for HalfCheetah)
            extra = dict(
                initial_collect_steps=1000,
                replay_buffer_capacity=100_000,
                train_checkpoint_interval=never,
                policy_checkpoint_interval=never,
                rb_checkpoint_interval=never,
            )
        train_eval.train_eval(
            root,
            env_name="Pendulum-v1",
            env_load_fn=suite_gym.load,
            num_iterations=iterations,
            eval_interval=iterations // 4,
            num_eval_episodes=10,
            log_interval=never,
            summary_interval=never,
            eval_metrics_callback=record,
            **extra,
        )
    elif agent == "ppo":  # its MuJoCo default is not installed: CartPole-v0 through suite_gym
        from tf_agents.agents.ppo.examples.v2 import train_eval_clip_agent as train_eval
        from tf_agents.environments import suite_gym
        from tf_agents.system import system_multiprocessing

        record_evals(train_eval.metric_utils, evals)
        system_multiprocessing.enable_interactive_mode()
        never = 10**9
        train_eval.train_eval(
            root,
            env_name="CartPole-v0",
            env_load_fn=suite_gym.load,
            random_seed=seed,
            num_environment_steps=iterations,
            collect_episodes_per_iteration=4,
            num_parallel_environments=4,
            num_eval_episodes=10,
            eval_interval=500,
            log_interval=never,
            summary_interval=never,
            train_checkpoint_interval=never,
            policy_checkpoint_interval=never,
        )
    else:
        raise SystemExit(f"agent: expected dqn, reinforce, ddpg, sac or ppo, got {agent!r}")
    print(f"RESULT {agent} {which} seed={seed} iterations={iterations} evals={evals} wall={time.time() - start:.0f}s")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
