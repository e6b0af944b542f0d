"""How fresh are the batches of TF-Agents' DQN loop, with TF-Agents' buffer and with ours?

    .venv-tf-agents/bin/python tests/tf_agents_suite/dataset_freshness.py

Both buffers get ids 0..999 (batch_size 1), then the loop TF-Agents' DQN example runs:
``as_dataset(num_parallel_calls=3, sample_batch_size=64, num_steps=2).prefetch(3)``, one
``next()`` then one add, 600 times. Printed per buffer: the median and smallest gap between
the newest id added and the newest id of the batch (uniform draws of 64 among 1,000-1,600
ids give ~20 by themselves; more means batches drawn before recent adds), the mean first id
and a chi-square per degree of freedom of the first ids 0..998 (~1 for uniform draws).
docs/tf_agents.md quotes it.
"""

import numpy as np
import tensorflow as tf
from tf_agents.replay_buffers import tf_uniform_replay_buffer as theirs

from replaybuf.tf_agents import tf_uniform_replay_buffer as ours

SPEC = (tf.TensorSpec([], tf.int64, "id"), tf.TensorSpec([4], tf.float32, "obs"))


def step(i: int) -> tuple:
    return tf.constant([i], tf.int64), tf.fill([1, 4], float(i))


def measure(module, added: int = 1000, reads: int = 600) -> str:
    tf.random.set_seed(0)
    buffer = module.TFUniformReplayBuffer(SPEC, batch_size=1, max_length=100_000)
    for i in range(added):
        buffer.add_batch(step(i))
    iterator = iter(buffer.as_dataset(num_parallel_calls=3, sample_batch_size=64, num_steps=2).prefetch(3))
    firsts, gaps = [], []
    for k in range(reads):
        (ids, _), _ = next(iterator)
        ids = ids.numpy()
        firsts.append(ids[:, 0])
        buffer.add_batch(step(added + k))
        gaps.append(added + k - ids[:, 1].max())
    first = np.concatenate(firsts)
    counts = np.bincount(first[first < added - 1], minlength=added - 1)
    chi2 = ((counts - counts.mean()) ** 2 / counts.mean()).sum() / (added - 2)
    return f"gap median {np.median(gaps):.0f} min {np.min(gaps)}, mean first id {first.mean():.1f}, chi2/dof {chi2:.2f}"


if __name__ == "__main__":
    for name, module in (("tf-agents", theirs), ("replaybuf", ours)):
        print(f"{name}: {measure(module)}")
