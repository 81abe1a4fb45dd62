"""Rollout workers on a real local Ray: generation, weight pushes, bounded async, and rollout workers
beside a sharded learner (the cluster shape of docs/scale.md, on one machine). The runs train the tiny
random Llama (`tiny_model_path`): these tests prove plumbing — who holds which weights, how stale a batch
is, what a dead process says — not what a model learns, and the 135M model made them 2 of the suite's
longest minutes."""

from __future__ import annotations

import pytest

from trainers.learn.distributed import state_digest
from trainers.recipes.grpo import Trainer
from trainers.sdk.events import MemorySink


def per_step(sink: MemorySink) -> list[dict]:
    """The `trajectories` events of each step merged into one (the trainer sends one per group)."""
    merged: dict[int, list] = {}
    for event in sink.of_type("trajectories"):
        merged.setdefault(event["step"], []).extend(event["items"])
    return [{"step": step, "items": items} for step, items in sorted(merged.items())]


pytestmark = pytest.mark.slow


@pytest.fixture()
def local_ray():
    ray = pytest.importorskip("ray")
    # Logical CPUs: the combined run places one rollout worker and two learner shards.
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_workers_roll_out_and_follow_the_learner(local_ray, tiny_model_path):
    config = {
        "model": tiny_model_path,
        "max_steps": 3,
        "group_size": 2,
        "prompts_per_step": 2,
        "max_new_tokens": 8,
        "max_turns": 1,
        "num_rollout_workers": 2,
        "max_staleness": 1,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "learning_rate": 1e-3,
        "weight_decay": 0.1,
        "environment": {"kind": "arithmetic_calculator", "config": {}},
    }
    sink = MemorySink()
    trainer = Trainer(config, sink=sink)
    trainer.setup()
    try:
        initial = state_digest(trainer.policy_state_dict())
        assert trainer.rollouts.weights_digests() == [initial, initial]
        for _ in range(3):
            trainer.train_step()
        # Weight decay moves every weight even without reward signal: the workers must have followed.
        assert trainer.rollouts.weights_digests() == [state_digest(trainer.policy_state_dict())] * 2
        assert state_digest(trainer.policy_state_dict()) != initial
    finally:
        trainer.rollouts.close()
    batches = per_step(sink)
    versions = [sorted({i["policy_version"] for i in b["items"]}) for b in batches]
    # Step 1 is generated on-policy; step n+1 is generated while step n updates: one version behind.
    assert versions == [[0], [0], [1]]
    assert all(len(b["items"]) == 4 for b in batches)
    assert sorted({(i["group"], i["sample"]) for i in batches[1]["items"]}) == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]


def test_rollouts_run_ahead_by_at_most_max_staleness_versions(local_ray, tiny_model_path):
    """One worker, max_staleness 2: it samples up to two batches ahead of the learner; each item says
    which policy sampled it and how stale it was, and the learner corrects with capped IS weights."""
    config = {
        "model": tiny_model_path,
        "max_steps": 4,
        "group_size": 2,
        "prompts_per_step": 1,
        "max_new_tokens": 6,
        "max_turns": 1,
        "num_rollout_workers": 1,
        "max_staleness": 2,
        "tis_cap": 2.0,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "learning_rate": 1e-3,
        "environment": {"kind": "arithmetic_calculator", "config": {}},
    }
    sink = MemorySink()
    trainer = Trainer(config, sink=sink)
    trainer.setup()
    try:
        for _ in range(4):
            trainer.train_step()
            assert len(trainer.sampler.pending) <= 2
    finally:
        trainer.rollouts.close()
    batches = per_step(sink)
    # Step 1 is sampled on-policy; steps 2 and 3 were submitted with it (version 0); step 4 after step
    # 2's update (version 1). Never more than 2 versions behind.
    assert [sorted({i["policy_version"] for i in b["items"]}) for b in batches] == [[0], [0], [0], [1]]
    assert [sorted({i["staleness"] for i in b["items"]}) for b in batches] == [[0], [1], [2], [2]]
    metrics = [m["values"] for m in sink.of_type("metrics")]
    assert [m["staleness/mean"] for m in metrics] == [0.0, 1.0, 2.0, 2.0]
    for m in metrics:
        if "logprob_mismatch/mean" in m:  # a step with signal: the gap and the mean IS weight
            assert m["logprob_mismatch/mean"] >= 0 and 0 < m["is_weight/mean"] <= 2.0


def test_rollout_workers_follow_a_sharded_learner(local_ray, tiny_model_path):
    """The cluster shape at its smallest: one rollout worker sampling a step ahead while two FSDP2
    learner processes (gloo) train; after every update the gathered weights reach the worker."""
    config = {
        "model": tiny_model_path,
        "max_steps": 3,
        "group_size": 2,
        "prompts_per_step": 2,
        "max_new_tokens": 6,
        "max_turns": 1,
        "num_rollout_workers": 1,
        "num_learner_workers": 2,
        "max_staleness": 1,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "learning_rate": 1e-3,
        "weight_decay": 0.1,
        "environment": {"kind": "arithmetic_calculator", "config": {}},
    }
    sink = MemorySink()
    trainer = Trainer(config, sink=sink)
    trainer.setup()
    try:
        initial = state_digest(trainer.policy_state_dict())
        assert trainer.rollouts.weights_digests() == [initial]
        for _ in range(3):
            trainer.train_step()
        # Weight decay moves every weight: the shards updated, and the worker has their gathered weights.
        final = state_digest(trainer.policy_state_dict())
        assert final != initial
        assert trainer.rollouts.weights_digests() == [final]
        shards = trainer.learner.shards.info()
        assert sorted(s["rank"] for s in shards) == [0, 1]
    finally:
        trainer.rollouts.close()
        trainer.learner.close()
    batches = per_step(sink)
    assert [sorted({i["policy_version"] for i in b["items"]}) for b in batches] == [[0], [0], [1]]
    assert [sorted({i["staleness"] for i in b["items"]}) for b in batches] == [[0], [1], [1]]
    losses = [m["values"].get("loss") for m in sink.of_type("metrics")]
    assert len(losses) == 3 and all(loss is None or loss == loss for loss in losses)  # no NaN


def test_a_run_bigger_than_the_ray_cluster_fails_at_once_instead_of_waiting(local_ray):
    """Ray queues an actor it has no room for forever; the run says why instead of hanging."""
    from trainers.learn.distributed import RayRollouts

    config = {"num_rollout_workers": 2, "num_learner_workers": 2}  # 4 actors on a 3-CPU Ray
    with pytest.raises(RuntimeError, match=r"needs 4 CPU \(the cluster has 3\)"):
        RayRollouts(config)


def test_a_rollout_worker_killed_mid_run_fails_the_step_saying_so(local_ray, tiny_model_path):
    """kill -9 of a worker process: the next step raises a sentence naming the dead worker, at once."""
    import os
    import signal
    import time

    from trainers.learn.distributed import RayWorkerDied

    config = {
        "model": tiny_model_path,
        "max_steps": 3,
        "group_size": 2,
        "prompts_per_step": 1,
        "max_new_tokens": 4,
        "max_turns": 1,
        "num_rollout_workers": 1,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "environment": {"kind": "arithmetic_calculator", "config": {}},
    }
    trainer = Trainer(config, sink=MemorySink())
    trainer.setup()
    try:
        trainer.train_step()
        os.kill(trainer.rollouts.pids[0], signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(RayWorkerDied, match=r"A rollout worker \(pids \d+\) died while .*resume it"):
            trainer.train_step()
        assert time.monotonic() - started < 60
    finally:
        trainer.rollouts.close()


def test_the_sizing_check_counts_gpus_and_custom_resources_and_names_the_shortfall():
    from trainers.learn.distributed import ray_resources_needed, ray_shortfall

    cuda = {"num_rollout_workers": 2, "num_learner_workers": 1, "device": "cuda"}
    assert ray_resources_needed(cuda) == {"CPU": 2.0, "GPU": 2.0}
    assert ray_resources_needed({**cuda, "device": "auto"}) == {"CPU": 2.0}
    # "auto" is the learner's resolved device once known: on a GPU worker the rollout workers need GPUs.
    assert ray_resources_needed({**cuda, "device": "auto"}, learner_device="cuda") == {"CPU": 2.0, "GPU": 2.0}
    assert ray_resources_needed({**cuda, "device": "auto"}, learner_device="cpu") == {"CPU": 2.0}
    message = ray_shortfall(ray_resources_needed(cuda), {"CPU": 16.0, "GPU": 1.0})
    assert message and "needs 2 GPU (the cluster has 1)" in message and "CPU" not in message.split(":")[1]
    assert ray_shortfall({"CPU": 1.0, "node:gpu-box": 1.0}, {"CPU": 4.0}) is not None
    assert ray_shortfall(ray_resources_needed(cuda), {"CPU": 2.0, "GPU": 2.0}) is None


def test_the_launch_asks_the_same_rule_of_a_reported_cluster():
    """What the web's launch check asks (`launch_shortfall`) is `ray_shortfall` of the run's actors on the
    cluster a worker reported; a local Ray is started with a CPU per actor, so only its GPUs can be short,
    and a run that places no Ray actors is never refused."""
    from trainers.learn.distributed import launch_shortfall

    cuda = {"num_rollout_workers": 2, "num_learner_workers": 1, "device": "cuda"}
    assert "needs 2 GPU (the cluster has 1)" in launch_shortfall(cuda, {"CPU": 8.0, "GPU": 1.0}, local=False)
    assert launch_shortfall(cuda, {"CPU": 8.0, "GPU": 2.0}, local=False) is None
    cpu = {**cuda, "device": "cpu", "num_rollout_workers": 6}
    assert "needs 6 CPU (the cluster has 2)" in launch_shortfall(cpu, {"CPU": 2.0}, local=False)
    assert launch_shortfall(cpu, {"CPU": 2.0}, local=True) is None  # init_ray sizes a local Ray for the run
    assert "needs 2 GPU (the cluster has 0)" in launch_shortfall(cuda, {"CPU": 2.0}, local=True)
    assert launch_shortfall({**cuda, "num_rollout_workers": 0}, {"CPU": 1.0}, local=False) is None
