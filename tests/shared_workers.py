"""Functions run in child processes by the shared-buffer and rate-limiter tests.

They live in a module of their own so that spawn and forkserver children can import them.
"""

from __future__ import annotations


def limiter_inserts(limiter, count: int, done) -> None:
    """Insert ``count`` items one at a time through a shared rate limiter."""
    for _ in range(count):
        limiter.await_insert(1, timeout=20)
        with done.get_lock():
            done.value += 1
