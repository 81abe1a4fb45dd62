"""Upgrading a team's database from the previous release: a database at that release's schema, with a
project's worth of data in it (users and tokens, runs of every kind with their curves, trajectories,
groups, a preference queue with judgements and a dataset, turn annotations, reward models, workers),
migrates to this release, and then every page and every GET endpoint the access tests enumerate answers
for the migrated objects, the data reads back as it was written, and a migrated run's token still
ingests.

The old world is written through the *historical* models of that schema
(`MigrationExecutor.loader.project_state(...).apps`), never through today's models or services, so a
column added since then is absent while it is written — as in a real old database.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.hashers import make_password
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

# --- the previous release: bump both at every release -------------------------------------------------
# The leaf migration of each of our apps at the previous release (main at d248160, the last landing before
# this round). At a release: set PREVIOUS_RELEASE to the released commit, list its leaves (`git ls-tree -r
# --name-only <commit> webapp | grep migrations/0`, the highest number per app), set
# KNOBS_ADDED_SINCE_PREVIOUS_RELEASE to () and, if the release stored something new (a model, a field that
# pages read), write it in `write_previous_release_world` too. A migration that squashes or renames one
# of these leaves fails `test_the_previous_releases_leaves_are_migrations_of_this_one` with what to do.
PREVIOUS_RELEASE = "d248160"
PREVIOUS_LEAVES: dict[str, str] = {
    "accounts": "0002_login_failure",
    "projects": "0002_invitation",
    "experiments": "0006_run_kind_and_preference_snapshot",
    "fleet": "0002_workernode_usage",
    "rollouts": "0015_metric_chunks",
    "review": "0006_activity_judge_asked",
    "rewards": "0002_reward_model_accuracy_threshold",
}
# Run knobs this release added: a run of the previous release has none of them in its resolved config.
KNOBS_ADDED_SINCE_PREVIOUS_RELEASE = ("micro_batch_tokens", "token_stats", "activation_checkpointing")

PASSWORD = "correct-horse-battery"
ROLES = {"alice": "owner", "bob": "researcher", "carol": "annotator", "dave": "viewer"}
CURVE = [(step, 0.1 * step) for step in range(1, 6)]  # reward/mean of the first run, steps 1-5


def _latest_leaves(executor: MigrationExecutor) -> list[tuple[str, str]]:
    return executor.loader.graph.leaf_nodes()


def our_apps(leaves: list[tuple[str, str]]) -> set[str]:
    """Our apps that have migrations (webapp.*)."""
    from django.apps import apps

    return {app for app, _ in leaves if apps.get_app_config(app).name.startswith("webapp.")}


def _previous_targets(executor: MigrationExecutor) -> list[tuple[str, str | None]]:
    """The previous release's leaves for our apps (None: an app made since, unmigrated), today's for
    Django's own (auth, sessions…)."""
    leaves = _latest_leaves(executor)
    ours = our_apps(leaves)
    return [
        *[(app, name) for app, name in leaves if app not in ours],
        *[(app, PREVIOUS_LEAVES.get(app)) for app in sorted(ours)],
    ]


def test_the_previous_releases_leaves_are_migrations_of_this_one():
    """Each leaf named above is still a migration, an ancestor of its app's leaf today: a squash or rename
    that drops one would make a previous release's database unmigratable, so it fails here by name."""
    graph = MigrationLoader(None).graph  # the migration files alone, no database
    leaves = dict(graph.leaf_nodes())
    assert set(PREVIOUS_LEAVES) <= our_apps(graph.leaf_nodes()), "only our apps' leaves"
    for app, name in PREVIOUS_LEAVES.items():
        assert (app, name) in graph.nodes, (
            f"{app}.{name}, the leaf of the previous release ({PREVIOUS_RELEASE}), is no longer a node of the "
            "migration graph: squashed, renamed or removed. A database of that release migrates only while the "
            "original migrations stay beside a squash (its `replaces`) and a released migration is never "
            "renamed; to squash past it, first make a release and move PREVIOUS_RELEASE and PREVIOUS_LEAVES "
            "(this file) to it."
        )
        assert (app, name) in graph.forwards_plan((app, leaves[app])), (
            f"{app}.{name} is not an ancestor of {app}.{leaves[app]}: the release's database would not "
            "migrate to today's schema."
        )


# --- the previous release's world, written through its own models -------------------------------------


class OldWorld:
    """The previous release's rows as its services wrote them, through the historical models: each
    `write_*` builder below adds one area and reads what the earlier ones made."""

    def __init__(self, apps, artifacts: Path) -> None:
        self.model = apps.get_model
        self.artifacts = artifacts
        self.now = timezone.now()
        self.users: dict[str, Any] = {}
        self.tokens: dict[str, tuple[Any, str]] = {}
        self.trajectories: list[Any] = []  # every trajectory written, with its turns as ingestion had them
        self.items: list[dict[str, Any]] = []

    @property
    def alice(self):
        return self.users["alice"]

    @property
    def bob(self):
        return self.users["bob"]

    @property
    def carol(self):
        return self.users["carol"]


RUBRIC_SPEC = {
    "aggregation": "weighted_sum",
    "criteria": [
        {"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}},
        {"name": "format", "kind": "regex", "weight": 0.2, "params": {"pattern": "<answer>.*</answer>"}},
    ],
}
JUDGE_CRITERION = {"name": "tone", "kind": "llm_judge", "weight": 1.0, "params": {"model": "policy"}}


def write_people(w: OldWorld) -> None:
    """Users with an API token each, a login failure; the project, its members and an invitation."""
    from webapp.accounts.models import hash_token

    User = w.model("auth", "User")
    w.users = {
        name: User.objects.create(
            username=name, email=f"{name}@example.com", password=make_password(PASSWORD, hasher="md5")
        )
        for name in [*ROLES, "eve"]
    }
    for name, user in w.users.items():
        raw = f"rsu_previous-release-token-of-{name}"
        w.tokens[name] = (
            w.model("accounts", "ApiToken").objects.create(
                user=user, name=f"{name}'s script", prefix=raw[:10], token_hash=hash_token(raw)
            ),
            raw,
        )
    w.model("accounts", "LoginFailure").objects.create(username="mallory", ip="10.0.0.9")

    w.project = w.model("projects", "Project").objects.create(
        name="Agents", slug="agents", created_by=w.alice
    )
    w.memberships = {
        name: w.model("projects", "Membership").objects.create(
            project=w.project, user=w.users[name], role=role
        )
        for name, role in ROLES.items()
    }
    w.invitation_token = "rsi_previous-release-invitation"
    w.invitation = w.model("projects", "Invitation").objects.create(
        project=w.project,
        role="viewer",
        note="Dana",
        token_hash=hash_token(w.invitation_token),
        created_by=w.alice,
        expires_at=w.now + timezone.timedelta(days=7),
    )


def write_definitions(w: OldWorld) -> None:
    """An environment in two versions and a rubric in one (its second comes with the reward model)."""
    w.environment = w.model("experiments", "Environment").objects.create(
        project=w.project, name="arith", created_by=w.alice
    )
    w.environment_v1 = w.environment.versions.create(
        number=1, kind="arithmetic_calculator", config={}, created_by=w.alice
    )
    w.environment_v2 = w.environment.versions.create(
        number=2, kind="arithmetic_calculator", config={"max_turns": 6}, note="longer", created_by=w.alice
    )
    w.rubric = w.model("experiments", "Rubric").objects.create(
        project=w.project, name="correctness", created_by=w.alice
    )
    w.rubric_v1 = w.rubric.versions.create(number=1, spec=RUBRIC_SPEC, created_by=w.alice)


def write_runs(w: OldWorld) -> None:
    """GRPO runs in each state (running, finished, failed, a queued fork) and an external run."""
    from trainers.config import resolve_run_config
    from webapp.accounts.models import hash_token
    from webapp.experiments.models import Run as TodaysRun

    knobs = {
        k: v for k, v in resolve_run_config("grpo", {}).items() if k not in KNOBS_ADDED_SINCE_PREVIOUS_RELEASE
    }
    Run = w.model("experiments", "Run")

    def rl_run(name: str, status: str, **fields: Any):
        run = Run.objects.create(
            project=w.project,
            name=name,
            created_by=w.bob,
            environment_version=w.environment_v2,
            rubric_version=w.rubric_v1,
            preset="grpo",
            resolved_config={
                **knobs,
                "environment": {
                    "name": "arith",
                    "version": 2,
                    "kind": "arithmetic_calculator",
                    "config": {"max_turns": 6},
                },
                "rubric": {"name": "correctness", "version": 1, **RUBRIC_SPEC},
            },
            status=status,
            max_steps=knobs["max_steps"],
            ingest_token_nonce="0123456789abcdef0123456789abcdef",
            **{"overrides": {}, **fields},
        )
        # Its ingestion token as the previous release issued it: only the hash is stored.
        token = TodaysRun(pk=run.pk, ingest_token_nonce=run.ingest_token_nonce).ingest_token()
        Run.objects.filter(pk=run.pk).update(ingest_token_hash=hash_token(token))
        return run

    w.run = rl_run(
        "first run",
        "RUNNING",
        started_at=w.now,
        heartbeat_at=w.now,
        current_step=5,
        last_reward=0.5,
        best_reward=0.5,
        last_seq=40,
        tags=["baseline"],
        note="the first try",
        worker="gpu-box:1",
    )
    w.finished = rl_run("finished", "SUCCEEDED", started_at=w.now, finished_at=w.now, current_step=3)
    rl_run("failed", "FAILED", error_message="CUDA out of memory", error_traceback="Traceback\n  boom")
    w.fork = rl_run(
        "lower lr", "QUEUED", parent=w.finished, lineage="fork", overrides={"learning_rate": 1e-7}
    )
    w.external = Run.objects.create(
        project=w.project,
        name="trl script",
        created_by=w.bob,
        origin="external",
        preset="external",
        status="RUNNING",
    )


def write_run_outputs(w: OldWorld) -> None:
    """The runs' checkpoints (one on disk, one deleted), metric curves and events."""
    # The first run's checkpoint directory, as trainers/learn/checkpoint.py writes one.
    (w.artifacts / "step-000001").mkdir(parents=True)
    (w.artifacts / "step-000001" / "model.safetensors").write_bytes(b"weights")
    Checkpoint = w.model("experiments", "Checkpoint")
    Checkpoint.objects.create(
        run=w.run, step=1, path=str(w.artifacts / "step-000001"), metrics={"reward/mean": 0.1}
    )
    w.kept = Checkpoint.objects.create(
        run=w.finished, step=3, path="/tmp/ckpt-3", metrics={"eval/accuracy": 0.5}
    )
    Checkpoint.objects.create(run=w.finished, step=1, path="/tmp/ckpt-1", deleted=True)
    w.model("experiments", "Run").objects.filter(pk=w.fork.pk).update(parent_checkpoint=w.kept)

    # Curves: what ingestion stored at that release, MetricChunk rows (read through the MetricPoint view).
    MetricChunk = w.model("rollouts", "MetricChunk")
    steps = [step for step, _ in CURVE]
    MetricChunk.objects.create(
        run=w.run,
        key="reward/mean",
        size=len(CURVE),
        min_step=1,
        max_step=5,
        steps=steps,
        values=[value for _, value in CURVE],
        wall_times=[1.7e9 + step for step in steps],
        tokens=[1000 * step for step in steps],
    )
    for run, key, steps, values in (
        (w.run, "loss", [1, 2], [1.5, 1.25]),
        (w.finished, "reward/mean", [3], [0.75]),
    ):
        MetricChunk.objects.create(
            run=run,
            key=key,
            size=len(values),
            min_step=steps[0],
            max_step=steps[-1],
            steps=steps,
            values=values,
            wall_times=[None] * len(values),
            tokens=[None] * len(values),
        )
    RunEvent = w.model("rollouts", "RunEvent")
    RunEvent.objects.create(run=w.run, seq=1, type="status", summary={"status": "RUNNING"})
    RunEvent.objects.create(
        run=w.run, seq=40, type="log", summary={"level": "info", "message": "step 5 done"}
    )


def trajectory_turns(group: int, sample: int, answer: str) -> list[dict[str, Any]]:
    """A tool-using answer to "What is group + (sample + 2)?"."""
    return [
        {"role": "system", "text": "Answer in <answer></answer>."},
        {"role": "user", "text": f"What is {group} + {sample + 2}?"},
        {
            "role": "assistant",
            "text": "",
            "tool_name": "calc",
            "tool_args": {"expression": f"{group}+{sample + 2}"},
        },
        {"role": "tool", "tool_name": "calc", "tool_result": str(group + sample + 2)},
        {
            "role": "assistant",
            "text": f"<answer>{answer}</answer>",
            "token_ids": [1, 2, 3],
            "loss_mask": [1, 1, 1],
        },
    ]


def write_trajectory(
    w: OldWorld, on, *, step: int, group: int, sample: int, reward: float, answer: str, split: str = "train"
):
    """One scored trajectory with its turns, as ingestion stored it."""
    Trajectory, Turn = w.model("rollouts", "Trajectory"), w.model("rollouts", "Turn")
    components = [
        {
            "name": "correct",
            "kind": "numeric_match",
            "raw": reward,
            "weight": 1.0,
            "weighted": reward,
            "explanation": "compared",
        },
        {
            "name": "format",
            "kind": "regex",
            "raw": 1.0,
            "weight": 0.2,
            "weighted": 0.2,
            "explanation": "matched",
        },
    ]
    turns = trajectory_turns(group, sample, answer)
    row = Trajectory.objects.create(
        run=on,
        step=step,
        split=split,
        group_index=group,
        sample_index=sample,
        task_id=f"task-{group}",
        seed=1000 + group,
        prompt=f"What is {group} + {sample + 2}?",
        reward=reward + 0.2,
        components=components,
        advantage=0.5 if reward else -0.5,
        num_turns=len(turns),
        num_tool_calls=1,
        prompt_tokens=20,
        completion_tokens=12,
        policy_version=step,
        env_state={"answer": answer},
        rubric_version=1,
    )
    Turn.objects.bulk_create(
        Turn(
            trajectory=row,
            index=index,
            role=t["role"],
            text=t.get("text", ""),
            tool_name=t.get("tool_name", ""),
            tool_args=t.get("tool_args"),
            tool_result=t.get("tool_result", ""),
            token_ids=t.get("token_ids"),
            loss_mask=t.get("loss_mask"),
        )
        for index, t in enumerate(turns)
    )
    w.trajectories.append(row)
    w.items.append({"turns": turns})
    return row


def write_trajectories(w: OldWorld) -> None:
    """A GRPO group of two on each run, an evaluation sample, each with a tool call; their search rows."""
    from webapp.rollouts.search import index_new_trajectories

    w.first = write_trajectory(w, w.run, step=1, group=0, sample=0, reward=1.0, answer="2")
    write_trajectory(w, w.run, step=1, group=0, sample=1, reward=0.0, answer="7")
    write_trajectory(w, w.run, step=2, group=0, sample=0, reward=1.0, answer="2", split="eval")
    w.pair_a = write_trajectory(w, w.finished, step=1, group=1, sample=0, reward=1.0, answer="3")
    w.pair_b = write_trajectory(w, w.finished, step=1, group=1, sample=1, reward=0.0, answer="9")
    index_new_trajectories(
        w.trajectories, w.items
    )  # the search documents and criterion scores ingestion wrote


def write_review(w: OldWorld) -> None:
    """A tag, a comment that mentions bob (and his notification), a flag, a turn annotation, activity."""
    first, carol = w.first, w.carol
    tag = w.model("review", "Tag").objects.create(project=w.project, name="reviewed")
    w.model("review", "TrajectoryTag").objects.create(trajectory=first, tag=tag, added_by=carol)
    comment = w.comment = w.model("review", "Comment").objects.create(
        project=w.project,
        trajectory=first,
        turn_index=4,
        author=carol,
        body="@bob is <answer>2</answer> right?",
    )
    w.notification = w.model("review", "Notification").objects.create(
        recipient=w.bob, project=w.project, actor=carol, comment=comment, trajectory=first
    )
    w.model("review", "Flag").objects.create(
        project=w.project, trajectory=first, reason="reward_wrong", raised_by=carol
    )
    w.model("review", "TurnJudgement").objects.create(
        project=w.project, trajectory=first, turn_index=2, verdict="wrong", annotator=carol
    )
    Activity = w.model("review", "Activity")
    Activity.objects.create(
        project=w.project, actor=w.bob, verb="run.launched", data={"run_id": w.run.pk, "name": w.run.name}
    )
    Activity.objects.create(
        project=w.project, actor=carol, verb="tag.added", trajectory=first, data={"tag": "reviewed"}
    )


def write_preferences(w: OldWorld) -> None:
    """A preference queue over the finished run's group: one pair, judged by carol; an LLM judge asked."""
    w.queue = w.model("review", "PreferenceQueue").objects.create(
        project=w.project,
        name="which is better",
        source="group",
        pairing="all",
        build_params={"split": "train"},
        seed=7,
        created_by=w.bob,
    )
    w.queue.runs.add(w.finished)
    w.queue.annotators.add(w.carol, w.bob)
    w.pair = w.model("review", "PreferencePair").objects.create(
        queue=w.queue, position=0, a=w.pair_a, b=w.pair_b, prompt=w.pair_a.prompt, judgement_count=1
    )
    w.model("review", "PairSlot").objects.create(
        pair=w.pair, index=0, holder=w.carol, left_is_a=True, judged=True
    )
    w.model("review", "Judgement").objects.create(
        pair=w.pair, annotator=w.carol, choice="a", rationale="right answer", left_is_a=True
    )
    w.model("review", "Activity").objects.create(
        project=w.project,
        actor=w.bob,
        verb="queue.created",
        queue=w.queue,
        data={"name": w.queue.name, "pairs": 1},
    )
    judged_rubric = w.model("experiments", "Rubric").objects.create(
        project=w.project, name="judged", created_by=w.alice
    )
    judged_v1 = judged_rubric.versions.create(
        number=1, spec={"aggregation": "weighted_sum", "criteria": [JUDGE_CRITERION]}, created_by=w.alice
    )
    w.judge = w.model("review", "QueueJudge").objects.create(
        queue=w.queue,
        rubric_version=judged_v1,
        criterion_name="tone",
        criterion=JUDGE_CRITERION,
        rubric_label="judged v1",
        status="queued",
        pairs_total=1,
        created_by=w.bob,
    )


def write_snapshot(w: OldWorld) -> None:
    """The queue's judgements frozen in a dataset snapshot of one pair."""
    queue, pair_a, pair_b = w.queue, w.pair_a, w.pair_b
    w.snapshot = w.model("review", "PreferenceSnapshot").objects.create(
        project=w.project,
        queue=queue,
        version=1,
        created_by=w.bob,
        provenance={
            "queue": {
                "id": queue.pk,
                "name": queue.name,
                "source": "group",
                "pairing": "all",
                "overlap": 1,
                "build": {"split": "train"},
            },
            "version": 1,
            "annotators": ["carol"],
            "judges": [],
            "runs": [{"id": w.finished.pk, "name": w.finished.name}],
            "steps": [1],
            "rule": "majority",
            "complete_only": False,
            "include_turns": False,
            "counts": {"pairs": 1, "included": 1},
            "created_by": "bob",
            "created_at": w.now.isoformat(),
        },
    )
    w.model("review", "SnapshotPair").objects.create(
        snapshot=w.snapshot,
        index=0,
        prompt=pair_a.prompt,
        chosen="<answer>3</answer>",
        rejected="<answer>9</answer>",
        prompt_messages=[{"role": "user", "content": pair_a.prompt}],
        chosen_messages=[{"role": "assistant", "content": "<answer>3</answer>"}],
        rejected_messages=[{"role": "assistant", "content": "<answer>9</answer>"}],
        chosen_reward=1.2,
        rejected_reward=0.2,
        provenance={
            "pair_id": w.pair.pk,
            "task_id": "task-1",
            "chosen_trajectory": pair_a.pk,
            "rejected_trajectory": pair_b.pk,
            "votes": {"chosen": 1, "rejected": 0, "tie": 0, "both_bad": 0},
            "annotators": ["carol"],
        },
    )
    w.model("review", "Activity").objects.create(
        project=w.project, actor=w.bob, verb="snapshot.created", queue=queue, data={"version": 1, "pairs": 1}
    )


def write_dpo_and_reward_models(w: OldWorld) -> None:
    """A DPO run on the snapshot (the kind and its snapshot came with the previous release's schema) and
    reward models: one ready and reliable (added to the rubric as its version 2), one queued."""
    w.dpo_run = w.model("experiments", "Run").objects.create(
        project=w.project,
        name="dpo",
        created_by=w.bob,
        kind="dpo",
        preference_snapshot=w.snapshot,
        preset="dpo",
        resolved_config={
            "kind": "dpo",
            "beta": 0.1,
            "max_steps": 3,
            "snapshot": {"id": w.snapshot.pk, "version": 1, "queue": w.queue.pk, "pairs": 1},
        },
        status="SUCCEEDED",
        max_steps=3,
        current_step=3,
    )
    w.model("experiments", "Checkpoint").objects.create(run=w.dpo_run, step=3, path="/tmp/dpo-3")

    RewardModel = w.model("rewards", "RewardModel")
    w.reward_model = RewardModel.objects.create(
        project=w.project,
        name="prefs",
        version=1,
        snapshot=w.snapshot,
        status="ready",
        path="/tmp/reward-model",
        params={"head": "linear", "epochs": 50},
        metrics={"held_out_accuracy": 0.9, "n_eval": 60, "n_pairs": 300},
        curve=[
            {"epoch": 1, "train_loss": 0.6, "train_accuracy": 0.7, "eval_loss": 0.65, "eval_accuracy": 0.8}
        ],
        progress=1.0,
        phase="save",
        created_by=w.bob,
        started_at=w.now,
        finished_at=w.now,
    )
    w.queued_model = RewardModel.objects.create(
        project=w.project, name="prefs", version=2, snapshot=w.snapshot, created_by=w.bob
    )
    learned = {
        "name": "prefs",
        "kind": "learned_reward",
        "weight": 0.5,
        "params": {"path": w.reward_model.path, "bounded": True, "only_when_checks_pass": True},
    }
    w.rubric.versions.create(
        number=2,
        spec={**RUBRIC_SPEC, "criteria": [*RUBRIC_SPEC["criteria"], learned]},
        note="adds prefs v1",
        created_by=w.bob,
    )


def write_worker(w: OldWorld) -> None:
    """A worker that reported itself, running the first run."""
    w.model("fleet", "WorkerNode").objects.create(
        hostname="gpu-box:1",
        queues=["gpu"],
        gpus=[{"index": 0, "name": "H100", "memory_mb": 81559}],
        cpus=16,
        usage={"cpu_percent": 12.0, "memory_used_mb": 1000, "memory_total_mb": 64000, "gpus": []},
        ray_address="local",
        pid=42,
        started_at=w.now,
        last_seen=w.now,
        current_run=w.run,
    )


def write_previous_release_world(apps, artifacts: Path) -> dict[str, Any]:
    """A project as the previous release stored it, written area by area through the historical models.
    Returns the raw secrets (tokens) and the ids the checks need."""
    w = OldWorld(apps, artifacts)
    for write in (
        write_people,
        write_definitions,
        write_runs,
        write_run_outputs,
        write_trajectories,
        write_review,
        write_preferences,
        write_snapshot,
        write_dpo_and_reward_models,
        write_worker,
    ):
        write(w)
    return {
        "tokens": {name: (token.pk, raw) for name, (token, raw) in w.tokens.items()},
        "invitation_token": w.invitation_token,
        "ids": {
            "project": w.project.pk,
            "environment": w.environment.pk,
            "environment_v1": w.environment_v1.pk,
            "rubric": w.rubric.pk,
            "run": w.run.pk,
            "finished_run": w.finished.pk,
            "fork": w.fork.pk,
            "external": w.external.pk,
            "dpo_run": w.dpo_run.pk,
            "trajectory": w.first.pk,
            "queue": w.queue.pk,
            "pair": w.pair.pk,
            "snapshot": w.snapshot.pk,
            "reward_model": w.reward_model.pk,
            "queued_model": w.queued_model.pk,
            "judge": w.judge.pk,
            "checkpoint": w.kept.pk,
            "invitation": w.invitation.pk,
            "notification": w.notification.pk,
            "comment": w.comment.pk,
            "memberships": {name: m.pk for name, m in w.memberships.items()},
        },
    }


# --- after the upgrade: today's models, pages and API ---------------------------------------------------


def migrated_objects(written: dict[str, Any]) -> dict[str, Any]:
    """The written objects, read back through today's models."""
    from webapp.accounts.models import ApiToken
    from webapp.experiments.models import Checkpoint, Environment, Rubric, Run
    from webapp.projects.models import Invitation, Membership, Project
    from webapp.review.models import (
        Comment,
        Notification,
        PreferencePair,
        PreferenceQueue,
        PreferenceSnapshot,
        QueueJudge,
    )
    from webapp.rewards.models import RewardModel
    from webapp.rollouts.models import Trajectory

    ids = written["ids"]
    return {
        "project": Project.objects.get(pk=ids["project"]),
        "environment": Environment.objects.get(pk=ids["environment"]),
        "rubric": Rubric.objects.get(pk=ids["rubric"]),
        "run": Run.objects.get(pk=ids["run"]),
        "finished_run": Run.objects.get(pk=ids["finished_run"]),
        "dpo_run": Run.objects.get(pk=ids["dpo_run"]),
        "trajectory": Trajectory.objects.get(pk=ids["trajectory"]),
        "queue": PreferenceQueue.objects.get(pk=ids["queue"]),
        "pair": PreferencePair.objects.get(pk=ids["pair"]),
        "snapshot": PreferenceSnapshot.objects.get(pk=ids["snapshot"]),
        "reward_model": RewardModel.objects.get(pk=ids["reward_model"]),
        "queued_model": RewardModel.objects.get(pk=ids["queued_model"]),
        "judge": QueueJudge.objects.get(pk=ids["judge"]),
        "checkpoint": Checkpoint.objects.get(pk=ids["checkpoint"]),
        "invitation": Invitation.objects.get(pk=ids["invitation"]),
        "invitation_token": written["invitation_token"],
        "notification": Notification.objects.get(pk=ids["notification"]),
        "comment": Comment.objects.get(pk=ids["comment"]),
        "memberships": {name: Membership.objects.get(pk=pk) for name, pk in ids["memberships"].items()},
        "tokens": {name: (ApiToken.objects.get(pk=pk), raw) for name, (pk, raw) in written["tokens"].items()},
    }


def page_answers(client, objects: dict[str, Any]) -> list[tuple[str, int, int | str]]:
    """Every GET page of the access tables (projects, experiments, accounts; review; rewards), opened by
    alice (the owner) on the migrated objects: (label, status, what the table expects of her)."""
    from tests.webapp.projects import test_access_pages as core_pages
    from tests.webapp.review import test_pages as review_pages
    from tests.webapp.rewards import test_pages as reward_pages

    world = {
        **objects,
        "dave_membership": objects["memberships"]["dave"],
        "own_token": objects["tokens"]["alice"][0],
        "secret_name": "JUDGE_KEY",
        "carol": objects["memberships"]["carol"].user,
        "criterion_key": "",
        "turn": SimpleNamespace(pk=objects["comment"].turn_index),  # a url names a turn by its index
    }
    answers = []
    for module in (core_pages, review_pages, reward_pages):
        for page in module.PAGES:
            if page.method != "get":
                continue
            expected = module.expected_status(page, "alice")
            response = client.get(page.url(world))
            answers.append(
                (f"{module.__name__.rsplit('.', 1)[-1]}: {page.label}", response.status_code, expected)
            )
    return answers


def more_pages(objects: dict[str, Any]) -> list[str]:
    """The read pages of the apps the access tables do not list (rollouts, live, fleet), on the migrated
    run and trajectory."""
    slug, run, trajectory = objects["project"].slug, objects["run"], objects["trajectory"]
    return [
        reverse("rollouts:group_list", args=[slug, run.pk]),
        reverse("rollouts:group_detail", args=[slug, run.pk, 1, 0]),
        reverse("rollouts:task_list", args=[slug, run.pk]),
        reverse("rollouts:trajectory_detail", args=[slug, trajectory.pk]),
        reverse("rollouts:trajectory_turns", args=[slug, trajectory.pk]) + "?start=2",
        reverse("rollouts:trajectory_json", args=[slug, trajectory.pk]),
        reverse("review:explorer", args=[slug]) + "?q=answer",
        reverse("review:explorer", args=[slug]) + "?criterion=correct&criterion_min=0.5",
        reverse("live:metrics_json", args=[slug, run.pk]),
        reverse("live:events_json", args=[slug, run.pk]),
        reverse("live:health_json", args=[slug, run.pk]),
        reverse("live:compare", args=[slug]) + f"?runs={run.pk},{objects['finished_run'].pk}",
        reverse("experiments:run_detail", args=[slug, objects["dpo_run"].pk]),
        reverse("experiments:run_detail", args=[slug, objects["finished_run"].pk]),
        reverse("fleet:workers"),
    ]


def api_answers(objects: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Every GET endpoint of the API's access matrix, called with alice's token of the previous release."""
    from tests.webapp.projects.test_access_apis import ENDPOINTS, World, expected_status

    # Only GET endpoints are called: the world's fields for writes (spare_project) are not needed.
    world = World(**{field: objects[field] for field in World.__dataclass_fields__ if field in objects})
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {objects['tokens']['alice'][1]}")
    answers = []
    for name, endpoint in ENDPOINTS.items():
        if endpoint.method == "GET":
            response = client.get(endpoint.url(world, "alice"))
            answers.append((name, response.status_code, expected_status(endpoint, "alice")))
    return answers


@pytest.mark.django_db(transaction=True)
def test_a_previous_release_database_migrates_and_every_page_and_api_works_on_its_data(client, tmp_path):
    executor = MigrationExecutor(connection)
    latest = _latest_leaves(executor)
    previous = _previous_targets(executor)
    try:
        executor.migrate(previous)
        old_state = MigrationExecutor(connection).loader.project_state([t for t in previous if t[1]])
        written = write_previous_release_world(old_state.apps, tmp_path / "artifacts")
    finally:
        # Whatever happened, today's schema again: the tests after this one (in any order) need it.
        MigrationExecutor(connection).migrate(latest)
    executor = MigrationExecutor(connection)
    assert not executor.migration_plan(latest), "the database is at today's schema"

    objects = migrated_objects(written)
    alice = objects["memberships"]["alice"].user
    client.force_login(alice)

    wrong = [answer for answer in page_answers(client, objects) if answer[1] != answer[2]]
    assert not wrong, wrong
    for url in more_pages(objects):
        response = client.get(url)
        assert response.status_code == 200, (url, response.content[:300])
    wrong = [answer for answer in api_answers(objects) if answer[1] != answer[2]]
    assert not wrong, wrong

    # The data reads back as it was written: the curve, the trajectory's turns, the dataset, the models.
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {objects['tokens']['bob'][1]}")
    run = objects["run"]
    metrics = api.get(f"/api/runs/{run.pk}/metrics/?keys=reward/mean").json()
    assert_curve(metrics)
    detail = api.get(f"/api/runs/{run.pk}/trajectories/{objects['trajectory'].pk}/").json()
    assert [turn["role"] for turn in detail["turns"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert detail["turns"][2]["tool_args"] == {"expression": "0+2"}
    assert detail["turns"][4]["text"] == "<answer>2</answer>"
    assert detail["reward"] == pytest.approx(1.2)
    groups = api.get(f"/api/runs/{run.pk}/groups/?split=train").json()
    assert [(g["step"], g["group"], g["size"]) for g in groups["groups"]] == [(1, 0, 2)]
    assert groups["groups"][0]["mean"] == pytest.approx(0.7)
    found = api.get("/api/projects/agents/trajectories/?q=answer").json()
    assert found["results"], found  # the search documents the previous release wrote still answer
    export = api.get(f"/api/preference-snapshots/{objects['snapshot'].pk}/export/?format=dpo")
    row = json.loads(export.content.decode().splitlines()[0])
    assert (row["chosen"][0]["content"], row["rejected"][0]["content"]) == (
        "<answer>3</answer>",
        "<answer>9</answer>",
    )
    model = api.get(f"/api/reward-models/{objects['reward_model'].pk}/").json()
    assert model["status"] == "ready" and model["metrics"]["held_out_accuracy"] == 0.9
    assert objects["reward_model"].cancel_requested is False  # a column this release added, defaulted
    assert objects["trajectory"].answer == "" and objects["trajectory"].env_reward is None
    run_page = client.get(reverse("experiments:run_detail", args=["agents", run.pk])).content.decode()
    assert "first run" in run_page and "the first try" in run_page

    # The token the previous release issued the running run still reports into the new schema.
    reply = APIClient().post(
        f"/api/runs/{run.pk}/events",
        {"events": [{"seq": 41, "type": "metrics", "step": 6, "values": {"reward/mean": 0.6}}]},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {run.ingest_token()}",
    )
    assert reply.status_code == 200, reply.content
    after = api.get(f"/api/runs/{run.pk}/metrics/?keys=reward/mean").json()
    assert_curve(after, extra=[(6, 0.6)])


def assert_curve(reply: dict, extra: list[tuple[int, float]] = ()) -> None:
    series = reply["series"]["reward/mean"] if "series" in reply else reply["reward/mean"]
    points = (
        list(zip(series["steps"], series["values"], strict=True))
        if isinstance(series, dict)
        else [(p["step"], p["value"]) for p in series]
    )
    expected = [*CURVE, *extra]
    assert [step for step, _ in points] == [step for step, _ in expected], reply
    assert [value for _, value in points] == pytest.approx([value for _, value in expected])
