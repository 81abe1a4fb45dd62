"""The sharded learner on a real local Ray with real gloo: 2 FSDP2 processes take the same step as one
process (loss, gradients, updated weights), and a run resumes from their sharded checkpoint."""

from __future__ import annotations

import copy

import pytest
import torch

from trainers.recipes.grpo import Trainer
from trainers.sdk.events import MemorySink

pytestmark = pytest.mark.slow

CONFIG = {
    "max_steps": 2,
    "group_size": 4,
    "prompts_per_step": 2,
    "max_new_tokens": 8,
    "max_turns": 1,
    "eval_tasks": 0,
    "checkpoint_every": 0,
    "learning_rate": 1e-3,
    "weight_decay": 0.1,
    "max_grad_norm": 1.0,
    "grad_accum_steps": 3,  # 8 rows over 3 micro-batches: the shards get uneven rows (3+3+2 → 2/1, 2/1, 1/1)
    "seed": 3,
}


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _trainer(tiny, toy_env, sink=None, out_dir=None, resume_from=None, rubric=None, **overrides):
    model, tokenizer = tiny
    return Trainer(
        {**CONFIG, **overrides},
        sink=sink or MemorySink(),
        env_factory=toy_env,
        rubric=rubric,
        model=copy.deepcopy(model),
        tokenizer=tokenizer,
        out_dir=out_dir,
        resume_from=resume_from,
    )


def stepped_grads(trainer) -> dict[str, torch.Tensor]:
    """The gradients each optimizer step of `trainer` used, by parameter name: a single process gives its
    gradients back after the update (Learner.update), so they are kept as the step starts."""
    kept: dict[str, torch.Tensor] = {}
    trainer.learner.optimizer.register_step_pre_hook(
        lambda *_: kept.update({n: p.grad.clone() for n, p in trainer.model.named_parameters()})
    )
    return kept


def test_two_learner_processes_take_the_single_process_step(local_ray, tiny, toy_env):
    single = _trainer(tiny, toy_env)
    single.setup()
    sharded = _trainer(tiny, toy_env, num_learner_workers=2)
    sharded.setup()
    stepped = stepped_grads(single)
    try:
        for step in range(2):
            one, two = single.train_step(), sharded.train_step()
            assert one["trained_sequences"] == two["trained_sequences"] > 0, step
            assert two["loss"] == pytest.approx(one["loss"], rel=1e-5, abs=1e-7)
            assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4)
            assert two["entropy"] == pytest.approx(one["entropy"], rel=1e-4)
            # The gradients the shards reduced, gathered: the single process's.
            grads = sharded.learner.shards.full_grads()
            for name, p in single.model.named_parameters():
                assert p.grad is None, name  # given back until the next update
                torch.testing.assert_close(grads[name], stepped[name], rtol=1e-4, atol=1e-6, msg=name)
            # The updated weights, gathered into the driver's copy (what rollouts sample from next).
            for (name, a), b in zip(
                single.model.state_dict().items(), sharded.model.state_dict().values(), strict=True
            ):
                torch.testing.assert_close(b, a, rtol=1e-4, atol=2e-6, msg=name)
        memory = sharded.learner.shards.info()
        total = sum(p.numel() for p in single.model.parameters())
        assert sorted(m["rank"] for m in memory) == [0, 1]
        assert all(abs(m["local_params"] - total / 2) <= total * 0.01 for m in memory)  # half each
    finally:
        single.rollouts.close()
        sharded.rollouts.close()
        sharded.learner.close()


def test_per_turn_advantages_reach_the_shards(local_ray, tiny, toy_env):
    """Per-token advantages (trainers.learn.turn_credit) travel in the shards' payload: the same step."""
    from tests.trainers.learn.test_turn_credit import TurnScoringRubric

    single = _trainer(tiny, toy_env, rubric=TurnScoringRubric(), turn_advantage_weight=1.0)
    single.setup()
    sharded = _trainer(
        tiny, toy_env, rubric=TurnScoringRubric(), turn_advantage_weight=1.0, num_learner_workers=2
    )
    sharded.setup()
    stepped = stepped_grads(single)
    try:
        one, two = single.train_step(), sharded.train_step()
        assert one["trained_sequences"] == two["trained_sequences"] > 0
        assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4)
        grads = sharded.learner.shards.full_grads()
        for name, _ in single.model.named_parameters():
            torch.testing.assert_close(grads[name], stepped[name], rtol=1e-4, atol=1e-6, msg=name)
    finally:
        single.rollouts.close()
        sharded.rollouts.close()
        sharded.learner.close()


def test_a_sharded_run_resumes_from_its_sharded_checkpoint(local_ray, tiny, toy_env, tmp_path):
    straight = _trainer(
        tiny, toy_env, num_learner_workers=2, checkpoint_every=1, out_dir=tmp_path / "a", sink=MemorySink()
    )
    straight_sink = straight.sink
    assert straight.run().status == "SUCCEEDED"
    step_one = tmp_path / "a" / "checkpoints" / "step-000001"
    shards = sorted(p.name for p in (step_one / "sharded").iterdir())
    assert "__0_0.distcp" in shards and "__1_0.distcp" in shards and ".metadata" in shards

    resumed_sink = MemorySink()
    resumed = _trainer(
        tiny,
        toy_env,
        num_learner_workers=2,
        checkpoint_every=1,
        out_dir=tmp_path / "b",
        resume_from=step_one,
        sink=resumed_sink,
    )
    assert resumed.run().status == "SUCCEEDED"
    assert not [e for e in resumed_sink.of_type("log") if "fresh AdamW" in e["message"]]

    def step_two(sink):
        return next(e["values"] for e in sink.of_type("metrics") if e["step"] == 2)

    again, first = step_two(resumed_sink), step_two(straight_sink)
    assert first["trained_sequences"] > 0
    assert again["loss"] == pytest.approx(first["loss"], rel=1e-6)
    # The AdamW moments came back from the shards: the second update lands on the same weights.
    for (name, a), b in zip(
        straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-7, msg=name)


def test_a_learner_shard_killed_mid_run_fails_the_step_saying_so(local_ray, tiny, toy_env):
    """kill -9 of one shard: its peer would wait in a collective for half an hour; the step fails at
    once with a sentence naming the dead shard instead."""
    import os
    import signal
    import time

    from trainers.learn.distributed import RayWorkerDied

    sharded = _trainer(tiny, toy_env, num_learner_workers=2)
    sharded.setup()
    try:
        sharded.train_step()
        victim = next(m["pid"] for m in sharded.learner.shards.info() if m["rank"] == 1)
        os.kill(victim, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(RayWorkerDied, match=r"A learner shard \(of 2\) died while .*resume it"):
            sharded.train_step()
        assert time.monotonic() - started < 60
    finally:
        sharded.rollouts.close()
        sharded.learner.close()


class _Peer:
    """A stand-in learner shard: `collective` fails as a gloo peer does when its partner's process is
    gone; `dies` is the partner, killed mid-call."""

    def collective(self, after_s: float) -> None:
        import time

        time.sleep(after_s)
        raise RuntimeError("[gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:29500")

    def dies(self, after_s: float) -> None:
        import os
        import signal
        import time

        time.sleep(after_s)
        os.kill(os.getpid(), signal.SIGKILL)

    def ok(self) -> str:
        return "ok"


def test_a_peers_connection_error_before_ray_reports_the_death_still_says_a_shard_died(local_ray):
    """The race the merged suite lost once: the surviving shard's gloo error arrives first (rank 0 is
    first in the list), the killed shard's death a moment later. The step says the shard died."""
    from trainers.learn.distributed import RayWorkerDied, ray_get

    peer = local_ray.remote(num_cpus=0)(_Peer)
    survivor, victim = peer.remote(), peer.remote()
    local_ray.get([survivor.ok.remote(), victim.ok.remote()])  # both processes up: the order is the test's
    refs = [survivor.collective.remote(0.2), victim.dies.remote(1.5)]
    with pytest.raises(RayWorkerDied, match=r"A learner shard \(of 2\) died while learning: .*resume it"):
        ray_get(refs, "A learner shard (of 2)", "learning")
    local_ray.kill(survivor)


def test_a_task_that_fails_with_its_peers_alive_keeps_its_own_error(local_ray):
    import time

    from trainers.learn.distributed import ray_get

    peer = local_ray.remote(num_cpus=0)(_Peer)
    failing, alive = peer.remote(), peer.remote()
    local_ray.get([failing.ok.remote(), alive.ok.remote()])
    started = time.monotonic()
    with pytest.raises(local_ray.exceptions.RayTaskError, match="Connection closed by peer"):
        ray_get([failing.collective.remote(0.0), alive.ok.remote()], "A learner shard (of 2)", "learning")
    assert time.monotonic() - started < 5  # no grace spent waiting when every peer has answered
    for actor in (failing, alive):
        local_ray.kill(actor)
