"""The exceptions replaybuf raises, in one tree.

    ReplayBufferError                 base of everything replaybuf raises on purpose
    ├── SpecError (ValueError)        a data_spec that cannot be built (a list in it, a bad shape)
    ├── SpecMismatchError (ValueError)
    │                                 an item or batch that does not match the data_spec
    │                                 (structure, shape, dtype, batch size); nothing is written
    ├── EmptyBufferError (ValueError) sampling or reading more than is stored
    ├── ArgumentError (ValueError)    an argument outside its range (sample_batch_size=0, ...)
    ├── PriorityError (ValueError)    a priority that is zero, negative or NaN, or an id
    │                                 that names no stored item
    ├── CheckpointError (ValueError)  a checkpoint or storage folder that is missing, corrupt,
    │                                 truncated, made for another buffer, or holds values no
    │                                 buffer could have produced; nothing is loaded
    ├── RateLimiterTimeout (TimeoutError)
    │                                 a rate-limited add or sample still blocked after its
    │                                 timeout; nothing was written or counted
    ├── BufferClosedError (RuntimeError)
    │                                 the buffer (or its rate limiter) was closed: waiters
    │                                 are woken with it, later calls raise it
    └── WritersGoneError (RuntimeError)
                                      a sample blocked by the rate limiter can never proceed:
                                      every writer process that could insert is gone

Every error that comes from user input is also a ValueError, so code written against
TF-Agents' ``except ValueError`` keeps working. Messages name the field path, what was
expected and what came: ``observation/camera: expected shape (3, 2) float32, got (3, 3)``.
"""

from __future__ import annotations

__all__ = [
    "ArgumentError",
    "BufferClosedError",
    "CheckpointError",
    "EmptyBufferError",
    "PriorityError",
    "RateLimiterTimeout",
    "ReplayBufferError",
    "SpecError",
    "SpecMismatchError",
    "WritersGoneError",
]


class ReplayBufferError(Exception):
    """Base class of every error replaybuf raises on purpose."""

    # Exception's own constructor: TensorFlow's autograph then re-raises these errors from a
    # traced tf.function as themselves (message extended), not as a StagingError.
    __init__ = Exception.__init__


class SpecError(ReplayBufferError, ValueError):
    """A data_spec that cannot be built: a list in the nest, a negative dimension, ..."""


class SpecMismatchError(ReplayBufferError, ValueError):
    """An item that does not match the data_spec; the buffer is left exactly as it was."""


class EmptyBufferError(ReplayBufferError, ValueError):
    """Sampling from an empty buffer, or asking for longer windows than are stored."""


class ArgumentError(ReplayBufferError, ValueError):
    """An argument outside its allowed range."""


class PriorityError(ReplayBufferError, ValueError):
    """A priority that is not finite and positive, or an id that names no stored item."""


class CheckpointError(ReplayBufferError, ValueError):
    """A checkpoint that cannot be loaded (missing, corrupt, another spec); nothing is loaded."""


class RateLimiterTimeout(ReplayBufferError, TimeoutError):
    """A rate-limited add or sample still blocked after its timeout; nothing was counted."""


class BufferClosedError(ReplayBufferError, RuntimeError):
    """The buffer or its rate limiter was closed; blocked calls are woken with this error."""


class WritersGoneError(ReplayBufferError, RuntimeError):
    """A sample the rate limiter holds back for inserts that cannot come: every writer process
    died or gave its writer up. Raised instead of waiting forever; nothing was sampled."""
