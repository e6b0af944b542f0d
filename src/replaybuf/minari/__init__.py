"""Minari offline-RL datasets in and out of replaybuf buffers (the ``minari`` extra).

``load(dataset, buffer=None)`` fills any buffer (NumPy, prioritized, frame-stack, torch,
JAX, shared) with a dataset's episodes as Trajectory items, the form the drivers collect;
``export(buffer, dataset_id)`` writes a buffer's complete episodes as a Minari dataset that
``minari.load_dataset`` reads. Minari is imported here only, never by ``import replaybuf``.
"""

from replaybuf.minari.exporting import export
from replaybuf.minari.loading import load

__all__ = ["export", "load"]
