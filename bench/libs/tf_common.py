"""The TensorFlow rows, shared by replaybuf.tf and TF-Agents (the same constructor and API).

``make(data_spec, batch_size, max_length)`` builds the buffer under test; every library gets
exactly the same harness. Both rows use the small transition of W1 as tf.TensorSpecs.
bench/tf_micro.py runs these same rows with TF-Agents in the same process.
"""

from __future__ import annotations

from common import BATCH, chunks, small_pool
from harness import repeat

ADDS_PER_CALL = 64
STREAMS = 64


def spec(tf):
    return {
        "obs": tf.TensorSpec([4], tf.float32, "obs"),
        "action": tf.TensorSpec([], tf.int64, "action"),
        "reward": tf.TensorSpec([], tf.float32, "reward"),
        "done": tf.TensorSpec([], tf.bool, "done"),
        "next_obs": tf.TensorSpec([4], tf.float32, "next_obs"),
    }


def tf_add(make):
    """``ADDS_PER_CALL`` add_batch calls of batch 1 in a tf.while_loop inside one tf.function.

    The loop is a driver's collect loop (TF-Agents' DynamicStepDriver runs its observers in
    a tf.while_loop) with the environment and policy taken out: step ``i`` fetches its item
    with one gather per leaf from a pool of pre-batched items, the cheapest feed a loop has,
    so what is timed is the loop and the adds.
    """

    def factory(sizes):
        import tensorflow as tf

        buffer = make(spec(tf), 1, sizes.capacity)
        pool = {k: tf.constant(v[:, None]) for k, v in small_pool(ADDS_PER_CALL).items()}

        @tf.function
        def add_many(items):
            for i in tf.range(ADDS_PER_CALL):
                buffer.add_batch({k: tf.gather(v, i) for k, v in items.items()})

        return repeat(add_many, pool)

    return factory


def call_add(make):
    """One ``tf.function`` call per ``add_batch`` of batch 1, the item passed as its argument."""

    def factory(sizes):
        import tensorflow as tf

        buffer = make(spec(tf), 1, sizes.capacity)
        item = {k: tf.constant(v[:1]) for k, v in small_pool(1).items()}

        @tf.function
        def add(items):
            buffer.add_batch(items)

        return repeat(add, item)

    return factory


def eager_add(make):
    """``add_batch`` of batch 1 called eagerly, one NumPy item per call (a Python collect loop)."""

    def factory(sizes):
        import tensorflow as tf

        buffer = make(spec(tf), 1, sizes.capacity)
        item = {k: v[:1] for k, v in small_pool(1).items()}
        return repeat(buffer.add_batch, item)

    return factory


def tf_dataset(make, tuned=False):
    """Iterating ``as_dataset(256, num_steps=2)`` over 64 streams holding ``stored`` items.

    As the TF-Agents tutorial writes it (no other argument), or with ``tuned`` as its DQN
    tutorial tunes it (``num_parallel_calls=3`` and ``.prefetch(3)``).
    """

    def factory(sizes):
        buffer, _ = _filled(make, sizes)
        if tuned:
            dataset = buffer.as_dataset(BATCH, num_steps=2, num_parallel_calls=3).prefetch(3)
        else:
            dataset = buffer.as_dataset(sample_batch_size=BATCH, num_steps=2)
        iterator = iter(dataset)

        return repeat(next, iterator)

    return factory


def tf_dataset_add(make):
    """The DQN loop: one add (a step of all 64 streams, in a tf.function as a driver collects)
    then one ``next()`` on ``as_dataset(256, num_steps=2)`` as the tutorial writes it; rounds/s.

    Every element must reflect the add before it (TF-Agents' draws are made when asked for,
    and so are replaybuf's: it draws ahead only while no add comes between reads).
    """

    def factory(sizes):
        import tensorflow as tf

        buffer, add = _filled(make, sizes)
        step = {k: tf.constant(v) for k, v in small_pool(STREAMS).items()}
        iterator = iter(buffer.as_dataset(sample_batch_size=BATCH, num_steps=2))

        def round_():
            add(step)
            next(iterator)

        return repeat(round_)

    return factory


def _filled(make, sizes):
    """A buffer of 64 streams holding ``sizes.stored`` items, and its tf.function add."""
    import tensorflow as tf

    buffer = make(spec(tf), STREAMS, sizes.capacity // STREAMS)

    @tf.function
    def add(items):
        buffer.add_batch(items)  # TF-Agents returns an Operation: not returned here

    for _, batch in chunks(small_pool(sizes.stored), sizes.stored, STREAMS):
        if len(batch["obs"]) == STREAMS:
            add({k: tf.constant(v) for k, v in batch.items()})
    return buffer, add
