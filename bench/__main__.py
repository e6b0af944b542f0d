"""``python -m bench SUITE ...``: see bench/runner.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runner  # noqa: E402

sys.exit(runner.main())
