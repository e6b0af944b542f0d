"""Test setup: the helper modules beside the tests are importable as top-level modules."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
