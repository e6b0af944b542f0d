"""Many actor processes write, one learner samples: ``SharedReplayBuffer`` and its writer handles.

See docs/many_writers.md for the layout (one segment and cursor per writer in one
``multiprocessing.shared_memory`` block), the commit protocol and what a crash loses.
"""

from replaybuf.shared.buffer import SharedReplayBuffer
from replaybuf.shared.writer import SharedWriter

__all__ = ["SharedReplayBuffer", "SharedWriter"]
