"""replaybuf on a Ray cluster: ``ShardedReplayBuffer``, one buffer spread over Ray actors.

Each shard is a Ray actor holding an ordinary replaybuf buffer; the driver object has the
common API, ``writer()`` hands out picklable ``ShardWriter`` handles, and sampling splits
every batch over the shards in proportion to their mass with exact probabilities. Needs the
``ray`` extra (``pip install 'replaybuf[ray]'``); ``import replaybuf`` never imports Ray.
See docs/ray.md.
"""

try:
    import ray  # noqa: F401
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("replaybuf.ray needs Ray: pip install 'replaybuf[ray]'") from err

from replaybuf.ray.buffer import ShardedReplayBuffer
from replaybuf.ray.remote import ShardUnavailableError
from replaybuf.ray.writer import ShardWriter

__all__ = ["ShardUnavailableError", "ShardWriter", "ShardedReplayBuffer"]
