"""Which training parts can a run use? What the workers report, and the check a launch makes with it.

Each worker reports the parts it has with its heartbeat (`WorkerNode.parts`: advantage estimators, losses,
rollout strategies and task sources, from `trainers.parts.part_catalogue`, with their docstrings, option
schemas and versions). The run form and `GET /api/parts/` list them; a launch naming a part that no online
worker of its queue has is refused with the reason (`trainers.parts.part_errors`, the trainer's own check,
asked with the workers' catalogue). With no worker of the queue online — the embedded default starts its
worker with the run, from this same install; a stack's worker may be restarting — the parts this process
has stand for the workers'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.apps import apps

from trainers.config import RUN_CONFIG_SCHEMA
from trainers.parts import PART_KINDS, PART_KNOBS, part_catalogue


def _online_workers(queue: str | None) -> list[Any]:
    # The fleet app sits above this one (it reaps runs), so its model is looked up, not imported.
    worker_node = apps.get_model("fleet", "WorkerNode")
    nodes = list(worker_node.objects.online())
    return [node for node in nodes if queue is None or queue in (node.queues or [])]


def worker_parts(queue: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """(catalogue, who has it): the parts the online workers of `queue` (None: of any queue) report, one
    entry per part with `workers`: [{hostname, queues, version}] of those that have it; with no worker
    of the queue online, this process's own parts (`workers` empty)."""
    nodes = _online_workers(queue)
    where = f"any online worker of the {queue} queue" if queue else "any online worker"
    if not nodes:
        # No worker of the queue is up (the embedded default starts its with the run; a compose stack's is
        # restarting, or waits for its database): the run queues with the "no online worker" warning, and
        # refusing it for parts nobody can report would turn a short outage into refused launches.
        return [{**part, "workers": []} for part in part_catalogue()], "this machine"
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for node in nodes:
        # A worker that reported no parts (one from before the report) is taken to have this install's:
        # unknown refuses nothing, as the Ray capacity check does.
        for part in node.parts or part_catalogue():
            key = (str(part.get("kind")), str(part.get("name")))
            entry = merged.setdefault(key, {**part, "workers": []})
            entry["workers"].append(
                {"hostname": node.hostname, "queues": list(node.queues or []), "version": part.get("version")}
            )
    order = {kind: i for i, kind in enumerate(PART_KINDS)}
    catalogue = sorted(merged.values(), key=lambda p: (order.get(p["kind"], len(order)), p["name"]))
    return catalogue, where


def parts_by_kind(catalogue: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """{kind: [part, …]} for every kind (empty lists included), in the catalogue's order."""
    grouped: dict[str, list[Mapping[str, Any]]] = {kind: [] for kind in PART_KINDS}
    for part in catalogue:
        grouped.setdefault(str(part.get("kind")), []).append(part)
    return grouped


def run_form_schema(catalogue: Iterable[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The run config schema as the run and fork forms show it: each part knob a choice among the parts
    the online workers have (`catalogue`; None: of any queue, `worker_parts`), its description listing
    each one's docstring, so the form offers what can run. The launch checks the chosen queue's."""
    grouped = parts_by_kind(catalogue if catalogue is not None else worker_parts(None)[0])
    schema = RUN_CONFIG_SCHEMA
    properties = dict(schema["properties"])
    for kind, knob in PART_KNOBS.items():
        prop = dict(properties[knob])
        names = [str(p["name"]) for p in grouped[kind]]
        default = prop.get("default")
        prop["enum"] = names if default in names or not default else [*names, default]
        listed = " ".join(f"{p['name']}: {p.get('description', '')}" for p in grouped[kind])
        prop["description"] = f"{prop.get('description', '')} The workers have — {listed}".strip()
        properties[knob] = prop
    return {**schema, "properties": properties}
