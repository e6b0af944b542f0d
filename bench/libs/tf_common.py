"""The TensorFlow rows, shared by replaybuf.tf and TF-Agents (the same constructor and API).

``make(data_spec, batch_size, max_length)`` builds the buffer under test. Both rows use the
small transition of W1 as tf.TensorSpecs.
"""

from __future__ import annotations

from common import BATCH, chunks, small_pool

ADDS_PER_CALL = 64


def _spec(tf):
    return {
        "obs": tf.TensorSpec([4], tf.float32, "obs"),
        "action": tf.TensorSpec([], tf.int64, "action"),
        "reward": tf.TensorSpec([], tf.float32, "reward"),
        "done": tf.TensorSpec([], tf.bool, "done"),
        "next_obs": tf.TensorSpec([4], tf.float32, "next_obs"),
    }


def tf_add(make):
    """``ADDS_PER_CALL`` add_batch calls of batch 1 in a loop inside one tf.function (as a TF driver does)."""

    def factory(sizes):
        import tensorflow as tf

        buffer = make(_spec(tf), 1, sizes.capacity)
        pool = {k: tf.constant(v) for k, v in small_pool(ADDS_PER_CALL).items()}

        @tf.function
        def add_many(items):
            for i in tf.range(ADDS_PER_CALL):
                buffer.add_batch({k: v[i : i + 1] for k, v in items.items()})

        def run(n):
            for _ in range(n):
                add_many(pool)

        return run

    return factory


def tf_dataset(make):
    """``as_dataset(256, num_steps=2)`` as the TF-Agents tutorial builds it, 64 streams holding ``stored`` items."""

    def factory(sizes):
        import tensorflow as tf

        streams = 64
        buffer = make(_spec(tf), streams, sizes.capacity // streams)
        @tf.function
        def add(items):
            buffer.add_batch(items)

        for _, batch in chunks(small_pool(sizes.stored), sizes.stored, streams):
            if len(batch["obs"]) == streams:
                add({k: tf.constant(v) for k, v in batch.items()})
        dataset = buffer.as_dataset(sample_batch_size=BATCH, num_steps=2, num_parallel_calls=3).prefetch(3)
        iterator = iter(dataset)

        def run(n):
            for _ in range(n):
                next(iterator)

        return run

    return factory
