"""Where Ray puts a run's actors, on a real two-node Ray cluster (`ray.cluster_utils.Cluster`) whose second
node declares a GPU it does not have (Ray takes a node's word for its resources): a CUDA run's rollout
workers and learner shards land on that node, a CPU run's ask for no GPU, and a run needing more GPUs
than the cluster declares is refused before any actor is created.

The actors are stand-ins that load no model and never touch CUDA: `RayRollouts.worker_class` and
`ShardedLearner.shard_class` swapped, while the resource request, the sizing check and the placement are
the trainer's own (`trainers.learn.distributed.actor_options`, `init_ray`)."""

from __future__ import annotations

import pytest

from trainers.learn.distributed import RayRollouts, actor_options
from trainers.learn.sharded import ShardedLearner

pytestmark = pytest.mark.slow  # starts Ray (two nodes)


class WhereAmI:
    """Answers the calls the trainer makes while it places its actors, and says which node it is on."""

    def __init__(self, *args: object) -> None:
        import os

        self.pid = os.getpid()

    def info(self, *args: object) -> dict:
        return {"pid": self.pid}

    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", 0)

    def setup(self, *args: object) -> int:
        return 0

    def node(self) -> dict:
        import os

        import ray

        context = ray.get_runtime_context()
        return {
            "node_id": context.get_node_id(),
            "gpu_ids": ray.get_gpu_ids(),
            "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }

    def close(self) -> None:
        pass


class ProbeRollouts(RayRollouts):
    worker_class = WhereAmI


class ProbeLearner(ShardedLearner):
    shard_class = WhereAmI


@pytest.fixture(scope="module")
def cluster():
    """A CPU-only head and a second node that declares one GPU (and nothing else differs)."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "num_gpus": 0, "include_dashboard": False},
    )
    gpu_node = cluster.add_node(num_cpus=2, num_gpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        yield {"gpu_node": gpu_node.node_id, "head": cluster.head_node.node_id}
    finally:
        ray.shutdown()
        cluster.shutdown()


def _nodes(actors: list) -> list[dict]:
    import ray

    return ray.get([a.node.remote() for a in actors])


def test_a_cuda_runs_rollout_workers_and_learner_shard_land_on_the_node_that_declares_a_gpu(cluster):
    import ray

    config = {"num_rollout_workers": 1, "num_learner_workers": 1, "device": "cuda"}
    rollouts = ProbeRollouts(config)
    try:
        (where,) = _nodes(rollouts.actors)
        assert where["node_id"] == cluster["gpu_node"] != cluster["head"]
        assert where["gpu_ids"] and where["cuda_visible"] == "0"  # Ray handed it the declared GPU
        assert ray.available_resources().get("GPU", 0) == 0
    finally:
        rollouts.close()  # kills the actors; the Ray it joined stays up (it did not start it)

    # The learner shards go through the same rule: one GPU each on a CUDA learner. Two shards would need
    # two GPUs (refused below), so one shard proves the placement.
    sharded = {"num_rollout_workers": 0, "num_learner_workers": 1, "device": "cuda"}
    learner = ProbeLearner(sharded, model=None, device="cuda")
    try:
        (where,) = _nodes(learner.shards)
        assert where["node_id"] == cluster["gpu_node"] and where["gpu_ids"]
    finally:
        learner.close()


def test_an_auto_run_whose_learner_found_a_gpu_rolls_out_on_the_gpu_node(cluster):
    """`device: auto` on a worker with GPUs (compose's gpu profile): the learner resolves to CUDA where the
    run starts, and its rollout workers ask for GPUs too, so none lands on a CPU-only node."""
    rollouts = ProbeRollouts({"num_rollout_workers": 1, "device": "auto"}, learner_device="cuda")
    try:
        (where,) = _nodes(rollouts.actors)
        assert where["node_id"] == cluster["gpu_node"] and where["gpu_ids"]
    finally:
        rollouts.close()


def test_a_cpu_runs_actors_ask_for_no_gpu(cluster):
    assert actor_options("cpu") == {"num_cpus": 1, "num_gpus": 0}
    assert actor_options("auto") == {"num_cpus": 1, "num_gpus": 0}  # "auto" decides on the node
    assert actor_options("cuda:0") == {"num_cpus": 1, "num_gpus": 1}
    rollouts = ProbeRollouts({"num_rollout_workers": 2, "device": "cpu"})
    try:
        assert all(not w["gpu_ids"] for w in _nodes(rollouts.actors))
    finally:
        rollouts.close()


def test_a_run_needing_more_gpus_than_the_cluster_declares_is_refused_before_any_actor_starts(cluster):
    config = {"num_rollout_workers": 2, "num_learner_workers": 1, "device": "cuda"}
    with pytest.raises(RuntimeError, match=r"needs 2 GPU \(the cluster has 1\).*add nodes \(with GPUs"):
        ProbeRollouts(config)
    sharded = {"num_rollout_workers": 0, "num_learner_workers": 2, "device": "cpu"}
    with pytest.raises(RuntimeError, match=r"needs 2 GPU \(the cluster has 1\)"):
        ProbeLearner(sharded, model=None, device="cuda")  # the learner resolved to CUDA on the driver
    assert _free() == {"CPU": 4.0, "GPU": 1.0}  # nothing was placed


def _free(timeout: float = 10.0) -> dict[str, float]:
    """CPUs and GPUs free once the actors earlier tests killed have given theirs back (Ray frees them
    asynchronously)."""
    import time

    import ray

    deadline = time.monotonic() + timeout
    while True:
        free = {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
        if free == {"CPU": 4.0, "GPU": 1.0} or time.monotonic() > deadline:
            return free
        time.sleep(0.1)
