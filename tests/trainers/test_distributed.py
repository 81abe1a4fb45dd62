"""Rollout workers on a real local Ray: generation, weight pushes, one-step off-policy."""

from __future__ import annotations

import pytest

from trainers.distributed import state_digest
from trainers.events import MemorySink
from trainers.trainer import Trainer

pytestmark = pytest.mark.slow


@pytest.fixture()
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_workers_roll_out_and_follow_the_learner(local_ray, smollm):
    model, tokenizer = smollm
    config = {
        "max_steps": 3,
        "group_size": 2,
        "prompts_per_step": 2,
        "max_new_tokens": 8,
        "max_turns": 1,
        "num_rollout_workers": 2,
        "one_step_off_policy": True,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "learning_rate": 1e-3,
        "weight_decay": 0.1,
        "environment": {"kind": "arithmetic_calculator", "config": {}},
    }
    sink = MemorySink()
    import copy

    trainer = Trainer(config, sink=sink, model=copy.deepcopy(model), tokenizer=tokenizer)
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
    batches = sink.of_type("trajectories")
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
