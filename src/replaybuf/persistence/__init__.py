"""Persistence: the checkpoint folder format (``folder``) and the state rules every buffer
shares (``state``). A buffer's ``state_dict()`` is plain; ``folder.write_state`` puts it on
disk atomically and ``folder.read_state`` reads it back verified (docs/persistence.md)."""

from replaybuf.persistence.folder import ArrayRun, StoredArray, read_state, write_state

__all__ = ["ArrayRun", "StoredArray", "read_state", "write_state"]
