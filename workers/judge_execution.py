"""What a worker does with a queued LLM judge: claim it, load its model, ask about every pair in both
orders, record the answers as it goes, and end DONE or FAILED with the reason.

Runs on a Celery worker (`workers.judge_tasks`), never in the web process: torch and the model are loaded
inside `execute_queue_judge` only. Like a reward model's training, it writes its few status rows straight
to the database.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db.models import Prefetch

from trainers.rubrics.judge import (
    PAIRWISE_MAX_NEW_TOKENS,
    PAIRWISE_REPLY_PREFIX,
    backend_generate,
    pairwise_prompt,
    parse_pairwise,
)
from trainers.sdk.cancel import check_cancel
from trainers.texts import trajectory_text
from webapp.core.jobs import job_cancel_requested, job_cancelled
from webapp.review.models import JudgeVerdict, PreferencePair, QueueJudge
from webapp.review.services import choice_from_side
from webapp.review.services.judges import (
    queue_judge_claim,
    queue_judge_fail,
    queue_judge_finish,
    queue_judge_record,
)
from webapp.rollouts.models import Turn
from workers.jobs import Job, run_job, worker_name

log = logging.getLogger(__name__)

# Pairs asked per generate call (each pair twice): big enough to batch, small enough that the page's
# progress moves every few seconds on a CPU.
PAIRS_PER_BATCH = 4

GenerateFn = Callable[[list[str]], list[str]]


def judge_model_name(judge: QueueJudge) -> str:
    """The model to load. "policy" (the criterion's default: the model a run trains) means the model the
    queue's first run started from; anything else is a model name as a run's `model` knob reads it."""
    name = judge.model_name
    if name != "policy":
        return name
    from trainers.models import DEFAULT_MODEL

    run = judge.queue.runs.order_by("pk").first()
    config = (run.resolved_config or {}) if run is not None else {}
    return str(config.get("model") or DEFAULT_MODEL)


def load_generate(judge: QueueJudge) -> GenerateFn:
    from trainers.rollout.backends import make_backend

    name = judge_model_name(judge)
    try:
        backend = make_backend("transformers", model_name=name)
    except Exception as exc:
        raise RuntimeError(f"Could not load the judge model {name!r}: {type(exc).__name__}: {exc}") from exc
    return backend_generate(
        backend, reply_prefix=PAIRWISE_REPLY_PREFIX, max_new_tokens=PAIRWISE_MAX_NEW_TOKENS
    )


def judge_job(judge_id: int, *, task_id: str = "", hostname: str = "") -> Job:
    """A queue judge as a background job: claimed QUEUED → RUNNING by this worker, ended cancelled (its
    answers so far kept) or FAILED with the reason."""
    worker = worker_name(hostname)
    return Job(
        label=f"queue judge {judge_id}",
        claim=lambda: queue_judge_claim(judge_id, worker=worker, task_id=task_id),
        status=lambda: QueueJudge.objects.filter(pk=judge_id).values_list("status", flat=True).first(),
        cancel_requested=lambda: job_cancel_requested(QueueJudge, judge_id),
        cancelled=lambda: job_cancelled(QueueJudge, judge_id),
        failed=lambda failure: queue_judge_fail(judge_id, error=failure.text),
    )


def execute_queue_judge(judge_id: int, *, task_id: str = "", hostname: str = "") -> str:
    # Cancel within seconds: the job's watcher reads the request every second; `_judge` checks it between
    # batches and the model's decode loop every step (trainers.sdk.cancel).
    return run_job(judge_job(judge_id, task_id=task_id, hostname=hostname), lambda _: _run(judge_id))


def _run(judge_id: int) -> str:
    judge = QueueJudge.objects.select_related("queue").get(pk=judge_id)
    _judge(judge, load_generate(judge))
    queue_judge_finish(judge_id)
    return "done"


def _judge(judge: QueueJudge, generate: GenerateFn) -> None:
    queue = judge.queue
    asked = set(JudgeVerdict.objects.filter(judge=judge).values_list("pair_id", "left_is_a"))
    in_order = Turn.objects.order_by("index")
    pairs = (
        PreferencePair.objects.filter(queue=queue)
        .select_related("a", "b")
        .prefetch_related(Prefetch("a__turns", queryset=in_order), Prefetch("b__turns", queryset=in_order))
        .order_by("position")
    )
    todo = [
        (pair, left_is_a)
        for pair in pairs
        for left_is_a in (True, False)
        if (pair.pk, left_is_a) not in asked
    ]
    texts: dict[int, tuple[str, str, str]] = {}
    for start in range(0, len(todo), 2 * PAIRS_PER_BATCH):
        check_cancel()  # between batches; the model's decode loop checks too (trainers.sdk.cancel)
        batch = todo[start : start + 2 * PAIRS_PER_BATCH]
        prompts = []
        for pair, left_is_a in batch:
            if pair.pk not in texts:
                a = trajectory_text(pair.a.prompt, pair.a.turns.all())
                b = trajectory_text(pair.b.prompt, pair.b.turns.all())
                texts[pair.pk] = (pair.prompt or a.prompt, a.response, b.response)
            prompt, a_text, b_text = texts[pair.pk]
            first, second = (a_text, b_text) if left_is_a else (b_text, a_text)
            prompts.append(
                pairwise_prompt(prompt=prompt, first=first, second=second, instructions=queue.instructions)
            )
        replies = generate(prompts)
        if len(replies) != len(prompts):
            raise RuntimeError(f"The judge model returned {len(replies)} replies for {len(prompts)} prompts.")
        answers = []
        for (pair, left_is_a), reply in zip(batch, replies, strict=True):
            named = parse_pairwise(reply)
            choice = choice_from_side("left" if named == 1 else "right", left_is_a=left_is_a) if named else ""
            answers.append((pair.pk, left_is_a, choice, reply))
        queue_judge_record(judge.pk, answers)
