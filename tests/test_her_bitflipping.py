"""The short version of docs/her.md's BitFlipping run: DQN + replaybuf.sb3.HerReplayBuffer
learns BitFlipping (8 bits) as well as with SB3's own HerReplayBuffer, same seed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("stable_baselines3")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_dqn_with_our_her_buffer_succeeds_as_with_sb3s():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import her_bitflipping

        results = her_bitflipping.main(["--bits", "8", "--steps", "1500", "--seeds", "0"])
    finally:
        sys.path.remove(str(EXAMPLES))
    (ours_training, ours_greedy), (sb3_training, sb3_greedy) = results["replaybuf"][0], results["sb3"][0]
    assert ours_training >= 0.9 and ours_greedy >= 0.9
    assert abs(ours_training - sb3_training) <= 0.05 and abs(ours_greedy - sb3_greedy) <= 0.05
