"""A pytest fixture (autouse, session): Stable-Baselines3's default log folders in one temporary folder.

SB3 makes a log folder for every model built without one: ``$SB3_LOGDIR``, else
``/tmp/SB3-<date and time>``, left behind. Both conftests (the main suite's and SB3's own
tests') point ``SB3_LOGDIR`` at one folder for the session and remove it afterwards.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def sb3_logs_in_one_folder() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="replaybuf-sb3-logs-")
    before = os.environ.get("SB3_LOGDIR")
    os.environ["SB3_LOGDIR"] = folder
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop("SB3_LOGDIR", None)
        else:
            os.environ["SB3_LOGDIR"] = before
        shutil.rmtree(folder, ignore_errors=True)
