"""The report's plots: replaybuf's ratio to each peer, one plot per family of workloads, and a summary.

A family (adds, samples, prioritized, ...) gathers workloads of several suites: ``FAMILIES``
names its members by ``suite`` or ``suite:workload key`` patterns, and a new suite joins a
family by an entry there (a workload in none is drawn under ``OTHER``, never dropped). A
family's plot draws, per workload, replaybuf's ratio to every library and plain reference
measured beside it on a log axis (above 1: replaybuf better), the goal marked on the bar it
is about, and the runs' dates and the machine's load in the caption. The summary, the
README's plot, is every goal's ratio. Each is written as PNG and as SVG (its text kept as
text), without dates or versions in the files, so the same results give the same bytes.
"""

from __future__ import annotations

import dataclasses
import os
import textwrap
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from harness import Workload

if TYPE_CHECKING:
    from report import Suite


@dataclasses.dataclass(frozen=True)
class Family:
    """The workloads of one plot: ``name`` (its files' stem), ``title``, and ``members``:
    fnmatch patterns of ``suite`` (all its workloads) or ``suite:key``."""

    name: str
    title: str
    members: tuple[str, ...]

    def holds(self, suite: str, key: str) -> bool:
        return any(fnmatchcase(f"{suite}:{key}" if ":" in p else suite, p) for p in self.members)


FAMILIES = (
    Family(
        "adds",
        "Adds",
        ("peers:w1_add*", "tf:tf_add", "jax_core:j1", "jax_gpu:jg_j1", "gpu:gpu_add_*", "gpu:gpu_ms_insert*"),
    ),
    Family(
        "samples",
        "Uniform samples",
        (
            "peers:w1_sample*",
            "tf:tf_dataset*",
            "jax_core:j2*",
            "jax_core:j5",
            "jax_gpu:jg_j2*",
            "jax_gpu:jg_j5",
            "gpu:gpu_sample*",
            "gpu:gpu_ms_sample*",
            "sample_rules",
        ),
    ),
    Family("prioritized", "Prioritized replay", ("peers:w3_*", "jax_core:j3*", "jax_gpu:jg_j3*", "gpu:gpu_per*")),
    Family("episodes", "Episodes and sequences", ("peers:w4_*", "jax_core:j4", "sequences")),
    Family("frames", "Image frames", ("peers:w2_*", "frames", "frames_compressed", "gpu:gpu_frames*")),
    Family("writers", "Many writer processes, one learner", ("writers",)),
    Family("ray", "Sharded on Ray", ("ray_shards",)),
    Family("sb3_her", "Stable-Baselines3 and hindsight relabelling", ("sb3", "her")),
    Family("rllib", "RLlib's episode buffers", ("rllib",)),
    Family("offline", "Offline datasets", ("minari_load",)),
)
OTHER = Family("other", "Other workloads", ("*",))
SUMMARY = "summary"
COLOURS = {
    "peer": "tab:blue",
    "reference": "tab:gray",
    "goal": "tab:orange",
    "met": "tab:green",
    "not met": "tab:red",
}
LEGEND = {
    "peer": "a peer library",
    "reference": "a plain reference, same process",
    "goal": "what the goal compares with",
    "met": "goal met",
    "not met": "goal not met",
}
#: no dates or versions written into the files; SVG ids from a fixed salt, text kept as text
_PNG = {"Software": None}
_SVG = {"Date": None, "Creator": None}
_RC = {"svg.fonttype": "none", "svg.hashsalt": "replaybuf", "font.size": 9}


def family_of(suite: str, key: str) -> Family:
    """The first family holding workload ``key`` of ``suite``; ``OTHER`` when none does."""
    return next((family for family in FAMILIES if family.holds(suite, key)), OTHER)


@dataclasses.dataclass(frozen=True)
class Bar:
    """One bar: its label, the ratio (None: not measured), its kind (a key of ``COLOURS``), its goal."""

    label: str
    ratio: float | None
    kind: str
    goal: float | None = None


@dataclasses.dataclass(frozen=True)
class Group:
    """A heading (a workload, or a family in the summary) and its bars."""

    title: str
    bars: list[Bar]


def _peer_bars(suite: Suite, workload: Workload) -> list[Bar]:
    goal_lib = suite.goal_lib(workload)
    bars = []
    for lib, ratio in suite.ratios(workload):
        if lib == goal_lib:
            goal = f"{workload.goal_ratio:g}x"
            bars.append(Bar(f"{lib} (goal {goal})", ratio, "goal", workload.goal_ratio))
        else:
            bars.append(Bar(lib, ratio, "reference" if lib in workload.references else "peer"))
    return bars


def _caption(drawn: list[tuple[Suite, dict]]) -> str:
    """The runs behind ``drawn`` (a suite and replaybuf's record each): date, the load at start and end."""
    runs = {}
    for suite, rec in drawn:
        run = suite.runs[rec["run"]]
        start, end = run["load_start"][0], run["load_end"][0]
        runs[f"{suite.name} {run['date']} (load {start:.1f} at the start, {end:.1f} at the end)"] = run["machine"]
    text = (
        "replaybuf's figure over each other's: the median over rounds of the ratio within one round; "
        "above 1x replaybuf is better (faster, or less memory). Load: the machine's 1-minute load average. "
        f"Runs: {'; '.join(runs)}. Machine: {'; '.join(sorted(set(runs.values())))}."
    )
    return textwrap.fill(text, 150)


def _times(ratio: float) -> str:
    """``ratio`` as "3.16x", "0.0073x" or "2,292x"."""
    return f"{ratio:,.0f}x" if ratio >= 100 else f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"


def _draw(title: str, groups: list[Group], caption: str, stem: Path) -> list[Path]:
    """Horizontal bars from 1x on a log axis, one heading row per group; ``stem``.png and .svg."""
    labels, rows = [], []
    for group in groups:
        labels.append(group.title)
        rows.append(None)
        for bar in group.bars:
            labels.append("  " + bar.label)
            rows.append(bar)
    lines = caption.count("\n") + 1
    fig = Figure(figsize=(11, 0.24 * len(labels) + 0.13 * lines + 1.3))
    ax = fig.add_subplot()
    drawn = [bar.ratio for bar in rows if bar and bar.ratio] + [bar.goal for bar in rows if bar and bar.goal]
    low, high = min(drawn + [1.0]) / 2, max(drawn + [1.0]) * 2.5
    for y, bar in enumerate(rows):
        if bar is None:
            continue
        if bar.ratio is None:
            ax.text(1.0, y, " no figure", va="center", fontsize=8)
        else:
            ax.barh(y, bar.ratio - 1.0, left=1.0, height=0.7, color=COLOURS[bar.kind])
            above = bar.ratio >= 1
            ax.text(
                bar.ratio * (1.04 if above else 1 / 1.04),
                y,
                _times(bar.ratio),
                va="center",
                ha="left" if above else "right",
                fontsize=8,
            )
        if bar.goal is not None:
            ax.plot([bar.goal] * 2, [y - 0.45, y + 0.45], color="black", linewidth=2)
    ax.axvline(1.0, color="black", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_yticks(range(len(labels)), labels)
    for tick, bar in zip(ax.get_yticklabels(), rows, strict=True):
        if bar is None:
            tick.set_fontweight("bold")
    ax.set_title(title, loc="left", fontweight="bold")
    ax.set_xlabel("replaybuf's ratio (log scale; above 1x: replaybuf better; black tick: the goal)")
    kinds = [kind for kind in COLOURS if any(bar and bar.kind == kind for bar in rows)]
    handles = [Patch(color=COLOURS[kind], label=LEGEND[kind]) for kind in kinds]
    ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=len(handles), fontsize=8)
    height = fig.get_figheight()
    fig.text(0.01, 0.1 / height, caption, fontsize=7, va="bottom", ha="left")
    fig.subplots_adjust(left=0.38, right=0.97, top=1 - 0.4 / height, bottom=(0.13 * lines + 0.75) / height)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    fig.savefig(paths[0], dpi=100, bbox_inches="tight", metadata=_PNG)
    fig.savefig(paths[1], bbox_inches="tight", metadata=_SVG)
    return paths


def by_family(found: list[Suite], folder: Path) -> dict[Family, list[Path]]:
    """One plot per family with a workload measured beside something else: its files, by family."""
    groups: dict[Family, list[Group]] = {}
    drawn: dict[Family, list[tuple[Suite, dict]]] = {}
    for suite in found:
        for workload, rec, _, _ in suite.ours():
            bars = _peer_bars(suite, workload)
            if bars:
                family = family_of(suite.name, workload.key)
                groups.setdefault(family, []).append(Group(f"{suite.name}: {workload.title}", bars))
                drawn.setdefault(family, []).append((suite, rec))
    with matplotlib.rc_context(_RC):
        return {
            family: _draw(family.title, groups[family], _caption(drawn[family]), folder / family.name)
            for family in (*FAMILIES, OTHER)
            if family in groups
        }


def wording(suite: Suite, workload: Workload) -> str:
    """A workload's name in the README's table and plot: its ``readme`` wording, else suite and title."""
    return workload.readme or f"{suite.name}: {workload.title}"


def goals(found: list[Suite]) -> list[tuple[Family, Suite, Workload, dict, str, float | None]]:
    """Every workload with a goal and a replaybuf figure, in the order of the families:
    (family, suite, workload, replaybuf's record, what the goal compares with, the ratio)."""
    rows = [
        (family_of(suite.name, workload.key), suite, workload, rec, label, got)
        for suite in found
        for workload, rec, label, got in suite.ours()
        if workload.goal_vs
    ]
    order = (*FAMILIES, OTHER)
    return sorted(rows, key=lambda row: order.index(row[0]))


def summary(found: list[Suite], folder: Path) -> list[Path]:
    """Every goal's ratio, grouped by family: the README's plot (its files; none without a goal)."""
    rows = goals(found)
    if not rows:
        return []
    groups: dict[Family, Group] = {}
    for family, suite, workload, _, label, got in rows:
        kind = "met" if got is not None and got >= workload.goal_ratio else "not met"
        bar = Bar(f"{wording(suite, workload)} vs {label}", got, kind, workload.goal_ratio)
        groups.setdefault(family, Group(family.title, [])).bars.append(bar)
    drawn = [(suite, rec) for _, suite, _, rec, _, _ in rows]
    with matplotlib.rc_context(_RC):
        return _draw("replaybuf against each goal's peer", list(groups.values()), _caption(drawn), folder / SUMMARY)


def link(image: Path, page: Path) -> str:
    """``image``'s path relative to the folder of the Markdown ``page`` that shows it."""
    return Path(os.path.relpath(image, page.parent)).as_posix()
