"""Factories for the reward-model tests: preference snapshots, made the way users make them (rollouts →
queue → judgements → snapshot) or written straight through the ORM when only the rows matter."""

from __future__ import annotations

import random
from collections.abc import Sequence

from webapp.review import services as review_services
from webapp.review.models import PreferenceSnapshot, SnapshotPair
from webapp.rollouts.models import Trajectory, Turn

GOOD = [
    "The answer is <answer>{s}</answer>.",
    "<answer>{s}</answer>",
    "{a} + {b} = {s}, so <answer>{s}</answer>",
]
BAD = [
    "I think it is {w}, but I am not sure.",
    "hmm {w}??",
    "Sorry, I cannot do math right now.",
    "{w} maybe, or something else",
]


def preference_texts(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """(prompt, preferred answer, worse answer): a tagged, confident answer beats a hedging one."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        s, w = a + b, a + b + rng.choice([-10, -1, 1, 10])
        rows.append(
            (f"What is {a} + {b}?", rng.choice(GOOD).format(a=a, b=b, s=s), rng.choice(BAD).format(w=w))
        )
    return rows


def answered(run, *, group: int, sample: int, prompt: str, answer: str, reward: float = 0.0) -> Trajectory:
    trajectory = Trajectory.objects.create(
        run=run,
        step=1,
        group_index=group,
        sample_index=sample,
        task_id=f"task-{group}",
        seed=group,
        prompt=prompt,
        reward=reward,
        num_turns=3,
    )
    Turn.objects.bulk_create(
        [
            Turn(trajectory=trajectory, index=0, role="system", text="You add numbers."),
            Turn(trajectory=trajectory, index=1, role="user", text=prompt),
            Turn(trajectory=trajectory, index=2, role="assistant", text=answer),
        ]
    )
    return trajectory


def annotated_snapshot(
    *,
    project,
    run,
    researcher,
    annotator,
    rows: Sequence[tuple[str, str, str]],
    queue_name: str = "style study",
) -> PreferenceSnapshot:
    """One GRPO group per row (the preferred and the worse answer), a queue over them, the annotator
    picks the preferred answer of every pair, and the researcher freezes a snapshot."""
    preferred = set()
    for group, (prompt, good, bad) in enumerate(rows):
        preferred.add(answered(run, group=group, sample=0, prompt=prompt, answer=good).pk)
        answered(run, group=group, sample=1, prompt=prompt, answer=bad)
    queue = review_services.queue_create(
        project=project,
        user=researcher,
        name=queue_name,
        runs=[run],
        annotators=[annotator],
        seed=1,
        distinct_rewards=False,  # the answers carry no reward: the annotator's judgement is the signal
    )
    while (assignment := review_services.next_pair(queue=queue, annotator=annotator)) is not None:
        pair = assignment.pair
        review_services.judgement_submit(
            pair=pair, annotator=annotator, choice="a" if pair.a_id in preferred else "b"
        )
    return review_services.snapshot_create(queue, researcher)


def direct_snapshot(
    *, project, queue=None, rows: Sequence[tuple[str, str, str]], user=None, version: int = 1
) -> PreferenceSnapshot:
    """A snapshot whose rows are written directly (no trajectories, no judgements)."""
    snapshot = PreferenceSnapshot.objects.create(
        project=project,
        queue=queue,
        version=version,
        created_by=user,
        provenance={"queue": {"name": getattr(queue, "name", "")}, "runs": []},
    )
    SnapshotPair.objects.bulk_create(
        [
            SnapshotPair(
                snapshot=snapshot,
                index=i,
                prompt=prompt,
                chosen=good,
                rejected=bad,
                prompt_messages=[{"role": "user", "content": prompt}],
                chosen_messages=[{"role": "assistant", "content": good}],
                rejected_messages=[{"role": "assistant", "content": bad}],
            )
            for i, (prompt, good, bad) in enumerate(rows)
        ]
    )
    return snapshot


def ready(reward_model, path: str = "/srv/reward_models/rm"):
    """`reward_model` claimed and finished as a worker would: ready at `path`, 87.5 % held-out accuracy on
    40 pairs (reliable)."""
    from webapp.rewards import services as reward_services
    from webapp.rewards.models import RewardModel

    reward_services.reward_model_claim(reward_model.pk, worker="w1")
    reward_services.reward_model_finish(
        reward_model.pk,
        path=path,
        metrics={"held_out_accuracy": 0.875, "n_eval": 40, "train_accuracy": 1.0, "n_train": 32},
        curve=[
            {"epoch": 1.0, "train_accuracy": 0.6, "eval_accuracy": 0.5},
            {"epoch": 2.0, "train_accuracy": 1.0, "eval_accuracy": 0.875},
        ],
    )
    return RewardModel.objects.get(pk=reward_model.pk)
