"""``HindsightRelabel``: hindsight experience replay (HER) as a step of sampling.

A sampled element's desired goal is replaced, with probability ``ratio``, by a goal that was
achieved in the same episode (``"future"``: at or after the element's last step; ``"final"``:
the episode's last stored step; ``"episode"``: any stored step of it), and its reward is
recomputed by the user's vectorised ``compute_reward``. Goals come from the episode
bookkeeping of ``respect_episodes=True`` (``replaybuf.samplers.hindsight``): never from
another episode, an overwritten step or a step not yet written. Nothing stored changes.

The parts: ``relabel`` (``HindsightRelabel``, what the user asks for, and ``relabel_part``),
``relabeller`` (a request bound to one buffer: its draws and writes), ``records`` (a whole
relabelled sample of a record storage in one compiled call).
"""

from replaybuf.hindsight.relabel import HindsightRelabel, relabel_part
from replaybuf.hindsight.relabeller import Drawn, Relabeller

__all__ = ["Drawn", "HindsightRelabel", "Relabeller", "relabel_part"]
