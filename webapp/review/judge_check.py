"""The judge check: a rubric's LLM judges score samples whose truth is known, and how far they agree.

The computation is `trainers.rubrics.judge_check.judge_agreement`; this module finds the truth and the
model. The truth is the environment's own verifier (`verifier_samples` on the environment version's
held-out tasks) or a preference queue's human judgements (each pair's majority choice is "right", the
other response "wrong"; ties and "both bad" say nothing). The judge model is loaded in this process once
(`_pool`: the bundled model loads in seconds and stays for the next check) — the check answers in
seconds on a small sample. A judge on an endpoint is not checked here (it would spend the project's key
on every launch): the rubric page says so.

Used by the rubric page's "Check the judge" and by the run form before a launch (warn or refuse, the
project's `untrusted_judge` setting). Results are kept per (judge params, model, samples) for the life of
the process, so the launch after a check — or the second submit of a warned form — does not ask the model
again. `JUDGE_CHECK_TASKS` (settings) is the sample size: tasks (or pairs), two samples each.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings

from trainers.registry import criterion_kind, environment_kind
from trainers.rubrics.judge import judge_where
from trainers.rubrics.judge_check import (
    SAMPLE_TASKS,
    JudgeAgreement,
    KnownSample,
    judge_agreement,
    one_thread,
    verifier_samples,
)
from trainers.rubrics.judge_models import JudgePool, judge_params
from webapp.experiments.models import EnvironmentVersion
from webapp.review import agreement
from webapp.review.models import Choice, Judgement, PreferencePair, PreferenceQueue
from webapp.rollouts.models import Trajectory

LLM_JUDGE = "llm_judge"
_LOCK = threading.Lock()
_RESULTS: dict[str, JudgeAgreement] = {}


@dataclass(frozen=True)
class JudgeCheck:
    """One judge criterion's check: its agreement, or why it was not checked."""

    criterion: str
    agreement: JudgeAgreement | None
    skipped: str = ""  # why there is no agreement ("on an endpoint", "no verdicts")

    @property
    def untrusted(self) -> bool:
        return self.agreement is not None and self.agreement.can_tell is False


@functools.cache
def _pool(policy_model: str) -> JudgePool:
    return JudgePool(policy_model=policy_model)


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def samples_from_environment(version: EnvironmentVersion, *, tasks: int = SAMPLE_TASKS) -> list[KnownSample]:
    """Held-out tasks of the environment version, answered right and wrong, graded by its verifier."""
    env = environment_kind(version.kind).build(version.config or {})
    try:
        return verifier_samples(env, tasks=tasks)
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()


def _final_answer(trajectory: Trajectory) -> str:
    last = trajectory.turns.filter(role="assistant").order_by("-index").first()
    return last.text if last is not None else ""


def samples_from_queue(queue: PreferenceQueue, *, pairs: int = SAMPLE_TASKS) -> list[KnownSample]:
    """The queue's decided pairs (the annotators' majority is A or B): the chosen response "right", the
    other "wrong"; at most `pairs` pairs, in the order annotators met them."""
    choices: dict[int, list[str]] = {}
    for pair_id, choice in Judgement.objects.filter(pair__queue=queue).values_list("pair_id", "choice"):
        choices.setdefault(pair_id, []).append(choice)
    decided = {
        pair_id: majority
        for pair_id, labels in choices.items()
        if (majority := agreement.majority_label(labels)) in (Choice.A, Choice.B)
    }
    samples: list[KnownSample] = []
    for pair in (
        PreferencePair.objects.filter(pk__in=decided).select_related("a", "b").order_by("position")[:pairs]
    ):
        chosen, rejected = (pair.a, pair.b) if decided[pair.pk] == Choice.A else (pair.b, pair.a)
        prompt = pair.prompt or chosen.prompt
        for trajectory, right in ((chosen, True), (rejected, False)):
            samples.append(
                KnownSample(
                    prompt, _final_answer(trajectory), right, trajectory.task_answer(), trajectory.task_id
                )
            )
    return samples


def judge_check(
    *,
    spec: Mapping[str, Any],
    environment_version: EnvironmentVersion | None = None,
    queue: PreferenceQueue | None = None,
    policy_model: str = "smollm2-135m",
    tasks: int | None = None,
) -> list[JudgeCheck]:
    """Check every `llm_judge` criterion of the rubric `spec` against the truth of `queue` (when given)
    or of the environment version's verifier."""
    judges = judge_params(spec)
    if not judges:
        return []
    tasks = tasks or settings.JUDGE_CHECK_TASKS
    source = "preferences" if queue is not None else "verifier"
    try:
        samples = _samples(queue, environment_version, tasks)
    except Exception as exc:  # noqa: BLE001 — a check that cannot run says why; it never breaks a page
        return [
            JudgeCheck(name, None, f"not checked: {type(exc).__name__}: {exc}"[:500]) for _, name, _ in judges
        ]
    checks = []
    for _index, name, params in judges:
        if judge_where(params) == "endpoint":
            checks.append(JudgeCheck(name, None, "its model is on an endpoint: not checked here"))
            continue
        if not samples:
            checks.append(JudgeCheck(name, None, _no_samples(source)))
            continue
        # Keyed by what the judge is shown, so a second check of the same judge on the same truth is free.
        key = _key(params, policy_model, source, [asdict(sample) for sample in samples])
        if key not in _RESULTS:
            try:
                criterion = criterion_kind(LLM_JUDGE).build(dict(params))
                with _LOCK, one_thread():  # one model, one generation at a time
                    criterion.attach_models(generate=_pool(policy_model).generate_for(criterion))
                    _RESULTS[key] = judge_agreement(criterion, samples, source=source)
            except Exception as exc:  # noqa: BLE001 — e.g. a judge model this machine cannot load
                checks.append(JudgeCheck(name, None, f"not checked: {type(exc).__name__}: {exc}"[:500]))
                continue
        checks.append(JudgeCheck(name, _RESULTS[key]))
    return checks


def _samples(
    queue: PreferenceQueue | None, environment_version: EnvironmentVersion | None, tasks: int
) -> list[KnownSample]:
    if queue is not None:
        return samples_from_queue(queue, pairs=tasks)
    return (
        samples_from_environment(environment_version, tasks=tasks) if environment_version is not None else []
    )


def _no_samples(source: str) -> str:
    if source == "preferences":
        return "the queue has no pair its annotators decided (A or B) yet"
    return "the environment's verifier gave no verdict (it reports no “correct”), so there is no truth to check against"


def clear_judge_checks() -> None:
    _RESULTS.clear()
