"""The TF rows: replaybuf.tf beside TF-Agents' TFUniformReplayBuffer (the DQN tutorial's calls).

TF-Agents runs on TensorFlow 2.15 in bench/.venvs/tfagents; replaybuf on the main
environment's TensorFlow (bench/libs/tf_common.py holds the shared workload code).
"""

from __future__ import annotations

from harness import Workload
from suites import Job

TF_AGENTS = "tf-agents TFUniform"

WORKLOADS = [
    Workload(
        "tf_add",
        "TF add_batch (batch 1), 64 per tf.function call",
        "items/s",
        64,
        peers=(TF_AGENTS,),
        goal_vs=TF_AGENTS,
        goal_ratio=5,
        readme="TF add_batch (batch 1) in a tf.function",
    ),
    Workload(
        "tf_dataset",
        "TF as_dataset(256, num_steps=2) iteration",
        "batches/s",
        peers=(TF_AGENTS,),
        goal_vs=TF_AGENTS,
        goal_ratio=3,
        readme="TF as_dataset(256, num_steps=2) iteration",
    ),
    Workload(
        "tf_dataset_add",
        "TF add one step, then next() on as_dataset(256, 2)",
        "rounds/s",
        peers=(TF_AGENTS,),
        goal_vs=TF_AGENTS,
        goal_ratio=1.5,
        readme="TF add one step, then next() (the DQN round)",
    ),
]

JOBS = [
    Job("replaybuf", None, ("replaybuf",), ("replaybuf_lib",)),
    Job("tfagents", "tfagents", (TF_AGENTS,), ("tfagents_lib",)),
]


def measure(job: Job, size: str, keys: list[str]) -> None:
    """Time the job's adapters on this suite's workloads."""
    import libs

    libs.measure(WORKLOADS, job.adapters, size, keys)
