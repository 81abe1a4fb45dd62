"""A worker reports the size of the real Ray cluster at its RAY_ADDRESS — a CPU-only head and a second node
that declares a GPU and a custom resource it does not have (Ray takes a node's word) — and the launch then
refuses a CUDA run that needs more GPUs than that cluster declares, naming the shortfall, while one that
fits is queued. The cluster is asked from a short-lived process, never by joining Ray in the worker."""

from __future__ import annotations

import math
import time

import pytest

pytestmark = pytest.mark.slow  # starts Ray (two nodes)


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1, num_gpus=1, resources={"accelerator_slot": 2})
    try:
        yield cluster.address
    finally:
        cluster.shutdown()


def wait_for_probe(deadline_s: float = 120.0) -> dict:
    from workers import node

    deadline = time.monotonic() + deadline_s
    while True:
        totals = node.ray_resources(measure=True) or {}
        if totals.get("GPU"):
            return totals
        if "ray_resources" in node._state and node._state["ray_probe_due"] != math.inf:
            node._state["ray_probe_due"] = 0.0  # measured before the second node joined: ask again now
        assert time.monotonic() < deadline, f"the worker never measured the cluster: {totals}"
        time.sleep(0.5)


def test_the_worker_reports_the_clusters_gpus_and_the_launch_refuses_a_run_it_cannot_hold(
    cluster, settings, project, environment, rubric, users
):
    from django.core.exceptions import ValidationError

    from webapp.experiments.services import run_create
    from webapp.fleet.models import WorkerNode
    from workers import node

    settings.RAY_ADDRESS = cluster
    node._state.update(hostname="gpu-worker:1", queues=["gpu"])
    for key in ("ray_resources", "ray_probe_due"):
        node._state.pop(key, None)

    totals = wait_for_probe()
    assert totals["GPU"] == 1.0 and totals["CPU"] == 2.0 and totals["accelerator_slot"] == 2.0
    node.report()
    stored = WorkerNode.objects.get(hostname="gpu-worker:1")
    assert stored.ray_address == cluster and stored.ray_resources["GPU"] == 1.0
    # A run's pool process (forked before the heartbeat thread measured anything) reports without a
    # measurement of its own: what the worker reported stands.
    measured = node._state.pop("ray_resources")
    node.report()
    assert WorkerNode.objects.get(hostname="gpu-worker:1").ray_resources == stored.ray_resources
    node._state["ray_resources"] = measured

    def launch(workers: int):
        return run_create(
            project=project,
            name=f"{workers} on cuda",
            environment=environment,
            rubric=rubric,
            preset="grpo",
            overrides={"device": "cuda", "num_rollout_workers": workers},
            user=users["bob"],
            queue="gpu",
            dispatch=False,
        )

    with pytest.raises(ValidationError, match=r"needs 2 GPU \(the cluster has 1\)"):
        launch(2)
    assert launch(1)[0].pk  # one rollout worker on the declared GPU fits
