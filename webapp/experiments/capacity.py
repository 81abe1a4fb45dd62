"""Can the run's Ray actors be placed? The launch check `run_create` makes before anything is queued.

Each worker reports the Ray cluster it runs on (`WorkerNode.ray_resources`, from `workers.node`); a run
whose rollout workers and learner shards no cluster of its queue's online workers can hold would wait
forever for room — the trainer refuses it at its first Ray contact, minutes later — so the launch refuses
it now, naming the shortfall, by the trainer's own rule (`WorkerNode.launch_shortfall` →
`trainers.learn.distributed.launch_shortfall`). A worker that reported no cluster, or no worker online,
refuses nothing: the check only says no when it knows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.apps import apps


def ray_capacity_errors(*, queue: str, config: Mapping[str, Any]) -> dict[str, list[str]]:
    """{knob path: [message]} when every online worker serving `queue` reports a Ray cluster too small for
    a run with the resolved knobs `config`; {} otherwise. The error sits on the knob that asks for the
    actors (`config.num_rollout_workers`, or `config.num_learner_workers` for learner shards alone)."""
    # The fleet app sits above this one (it reaps runs), so its model is looked up, not imported.
    worker_node = apps.get_model("fleet", "WorkerNode")
    serving = [node for node in worker_node.objects.online() if queue in (node.queues or [])]
    shortfalls = {node.hostname: node.launch_shortfall(dict(config)) for node in serving}
    if not shortfalls or any(shortfall is None for shortfall in shortfalls.values()):
        return {}
    hosts = ", ".join(sorted(shortfalls))
    reasons = " ".join(dict.fromkeys(str(shortfall) for shortfall in shortfalls.values()))
    field = (
        "num_rollout_workers" if int(config.get("num_rollout_workers", 0) or 0) > 0 else "num_learner_workers"
    )
    return {
        f"config.{field}": [
            f"No worker of the {queue} queue can place this run's Ray actors ({hosts}). {reasons}"
        ]
    }
