"""Writes for LLM judges annotating a preference queue: ask one, record what its worker did.

Status moves QUEUED → RUNNING → DONE / FAILED, each step one conditional UPDATE (as for reward models),
so a redelivered task cannot judge twice and a late failure cannot overwrite a finished judge. Asking a
failed judge again queues the same judge: the pairs it already answered in both orders are kept.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from webapp.core.dispatch import Queue, Task, queue_refusal, send_on_commit, send_pending
from webapp.core.jobs import job_request_cancel
from webapp.experiments.models import RubricVersion
from webapp.fleet.selectors import lost_jobs
from webapp.review.models import ActivityVerb, JudgeStatus, JudgeVerdict, PreferenceQueue, QueueJudge
from webapp.review.services.activity import log_activity

LLM_JUDGE = "llm_judge"


def _record_task_id(judge_id: int, task_id: str) -> None:
    QueueJudge.objects.filter(pk=judge_id).update(task_id=task_id)


def _criterion(rubric_version: RubricVersion, name: str) -> dict:
    for criterion in (rubric_version.spec or {}).get("criteria") or []:
        if isinstance(criterion, dict) and criterion.get("name") == name:
            if criterion.get("kind") != LLM_JUDGE:
                raise ValidationError(
                    {"criterion": [f"“{name}” is a {criterion.get('kind')} criterion, not an LLM judge."]}
                )
            return criterion
    raise ValidationError({"criterion": [f"{rubric_version} has no criterion named “{name}”."]})


def queue_judge_start(
    *,
    queue: PreferenceQueue,
    user,
    rubric_version: RubricVersion,
    criterion_name: str,
    in_snapshots: bool = False,
    worker_queue: str = Queue.CPU,
    dispatch: bool = True,
) -> QueueJudge:
    """Ask an `llm_judge` criterion of a project rubric to annotate every pair of `queue`, in both
    orders, on a worker after commit. A failed or cancelled judge of the same criterion is asked again (its answers
    so far kept); one that is queued, judging or done is refused."""
    if rubric_version.rubric.project_id != queue.project_id:
        raise ValidationError({"criterion": ["Choose a rubric of this project."]})
    if refusal := queue_refusal(worker_queue):
        raise ValidationError({"worker_queue": [refusal]})
    criterion = _criterion(rubric_version, criterion_name)
    pairs = queue.pairs.count()
    with transaction.atomic():
        judge, created = QueueJudge.objects.select_for_update().get_or_create(
            queue=queue,
            rubric_version=rubric_version,
            criterion_name=criterion_name,
            defaults={
                "criterion": criterion,
                "rubric_label": str(rubric_version),
                "in_snapshots": in_snapshots,
                "worker_queue": worker_queue,
                "pairs_total": pairs,
                "created_by": user,
            },
        )
        if not created:
            if judge.status not in (JudgeStatus.FAILED, JudgeStatus.CANCELLED):
                raise ValidationError(
                    {
                        "criterion": [
                            f"{judge.label} is already {judge.get_status_display().lower()} on this queue."
                        ]
                    }
                )
            judge.status = JudgeStatus.QUEUED
            judge.in_snapshots = in_snapshots
            judge.worker_queue = worker_queue
            judge.pairs_total = pairs
            judge.error_message = ""
            judge.finished_at = None
            judge.cancel_requested = False
            judge.save(
                update_fields=[
                    "status",
                    "cancel_requested",
                    "in_snapshots",
                    "worker_queue",
                    "pairs_total",
                    "error_message",
                    "finished_at",
                ]
            )
        log_activity(
            queue.project, user, ActivityVerb.JUDGE_ASKED, queue=queue, judge=judge.label, pairs=pairs
        )
        if dispatch:
            send_on_commit(
                Task.JUDGE_QUEUE,
                args=[judge.pk],
                queue=judge.worker_queue,
                on_sent=functools.partial(_record_task_id, judge.pk),
            )
    return judge


def queue_judge_set_in_snapshots(*, judge: QueueJudge, in_snapshots: bool) -> None:
    """Whether the judge's verdicts count as one more vote in the queue's next dataset snapshots."""
    QueueJudge.objects.filter(pk=judge.pk).update(in_snapshots=in_snapshots)
    judge.in_snapshots = in_snapshots


def queue_judge_cancel(*, judge: QueueJudge) -> str:
    """Stop an LLM judge: dropped at once while queued, else its worker stops it within seconds (between
    batches, or inside the model's decode loop: `webapp.core.jobs`). The answers it recorded stay, and
    asking it again resumes from them. Returns "cancelled" or "cancel_requested"."""
    return job_request_cancel(judge)


def queue_judge_claim(judge_id: int, *, worker: str, task_id: str = "") -> bool:
    """QUEUED → RUNNING, once. False when another delivery of the task got there first (or it ended)."""
    return bool(
        QueueJudge.objects.filter(pk=judge_id, status=JudgeStatus.QUEUED).update(
            status=JudgeStatus.RUNNING, worker=worker, task_id=task_id or "", started_at=timezone.now()
        )
    )


def queue_judge_record(judge_id: int, answers: Iterable[tuple[int, bool, str, str]]) -> int:
    """Store answers (pair id, A shown first, canonical choice or "", reply) and recount the pairs
    answered in both orders. Answers already stored (a redelivered batch) are kept as they were."""
    rows = [
        JudgeVerdict(
            judge_id=judge_id, pair_id=pair_id, left_is_a=left_is_a, choice=choice, reply=reply[:2000]
        )
        for pair_id, left_is_a, choice, reply in answers
    ]
    with transaction.atomic():
        JudgeVerdict.objects.bulk_create(rows, ignore_conflicts=True)
        done = (
            JudgeVerdict.objects.filter(judge_id=judge_id)
            .values("pair_id")
            .annotate(orders=Count("id"))
            .filter(orders=2)
            .count()
        )
        QueueJudge.objects.filter(pk=judge_id).update(pairs_done=done)
    return done


def queue_judge_finish(judge_id: int) -> bool:
    return bool(
        QueueJudge.objects.filter(pk=judge_id, status=JudgeStatus.RUNNING).update(
            status=JudgeStatus.DONE, finished_at=timezone.now()
        )
    )


def queue_judge_fail(judge_id: int, *, error: str) -> bool:
    return bool(
        QueueJudge.objects.filter(pk=judge_id, status__in=[JudgeStatus.QUEUED, JudgeStatus.RUNNING]).update(
            status=JudgeStatus.FAILED, error_message=error[:5000], finished_at=timezone.now()
        )
    )


def queue_judges_dispatch_pending() -> list[int]:
    """Send the task of every queued judge whose asking found the broker unreachable
    (`BackgroundJob.dispatch_pending`); the ids sent now. Sending one twice is harmless: the worker claims
    a judge with a conditional update (`queue_judge_claim`)."""
    return send_pending(
        QueueJudge.objects.filter(status=JudgeStatus.QUEUED),
        task=Task.JUDGE_QUEUE,
        queue_field="worker_queue",
    )


def queue_judges_reap_lost(*, now=None, timeout_s: int | None = None) -> list[int]:
    """Fail RUNNING judges whose worker stopped heartbeating, so the queue page says so instead of
    showing "judging" forever. Returns the ids it failed."""
    lost = lost_jobs(
        QueueJudge.objects.filter(status=JudgeStatus.RUNNING), doing="judging", now=now, timeout_s=timeout_s
    )
    return [
        pk
        for pk, reason in lost
        if queue_judge_fail(pk, error=f"{reason} Ask the judge again: the pairs it answered are kept.")
    ]
