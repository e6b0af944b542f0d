"""The suite's own check: SB3's names are ours where SB3's tests and algorithms read them."""

import importlib

from suite import SWAPS


def test_every_swapped_name_is_ours_where_sb3_reads_it():
    from stable_baselines3.common import off_policy_algorithm

    for theirs, ours in SWAPS.items():
        module, _, name = theirs.rpartition(".")
        our_module, _, our_name = ours.rpartition(".")
        expected = getattr(importlib.import_module(our_module), our_name)
        assert getattr(importlib.import_module(module), name) is expected
        if hasattr(off_policy_algorithm, name):
            assert getattr(off_policy_algorithm, name) is expected
