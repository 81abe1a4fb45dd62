"""Can this judge tell right from wrong? Its scores on samples whose truth is known, before it trains.

bench/learning.py --judge measured what an untrusted judge does: the bundled 135M model scored nearly every
answer 10, the reward sat at its maximum and held-out accuracy fell 51 % → 5 %. `judge_agreement` is the
one computation of how far a judge agrees with the truth; the dashboard's judge check (the rubric page,
the run form before a launch: webapp/experiments/services/judge_check.py) calls it. The truth comes from

- the environment's own verifier (`verifier_samples`): for held-out tasks, the reference answer and
  another task's answer, each graded by the environment (`info["correct"]`) — so the verdict is the
  environment's, not an assumption — or
- the human judgements of a preference queue: the chosen response of a pair is "right", the rejected one
  "wrong" (webapp builds those samples from the queue).

The judge's score is its criterion's raw value (0–1 once normalized); "says right" is a score at or above
the alarm's LEARNED_HIGH, the mark the reward-hacking flag reads (trainers/rubrics/alarms.py).

Plain Python: no Django; a model is needed only through the criterion's attached `generate`.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from trainers.rubrics.agreement import cohens_kappa
from trainers.rubrics.alarms import LEARNED_HIGH
from trainers.types import Task, Trajectory, Turn

# A judge whose scores order right above wrong no better than this (AUC), or agree with the truth beyond
# chance no more than this (Cohen's κ), cannot tell right from wrong.
MIN_AUC = 0.7
MIN_KAPPA = 0.2
SAMPLE_TASKS = 8  # tasks per check: two samples each (seconds with the bundled model on a CPU)


@dataclass(frozen=True)
class KnownSample:
    """One response whose truth is known: `right` is the verifier's (or a person's) verdict."""

    prompt: str
    response: str
    right: bool
    answer: Any = None  # the task's reference answer, for a judge template that shows it
    task_id: str = ""


@dataclass(frozen=True)
class JudgeAgreement:
    """How a judge's scores agree with the truth on `n` samples."""

    n: int
    accuracy: float | None  # share of samples where "score ≥ threshold" matches the truth
    auc: float | None  # P(a right sample scores above a wrong one), ties half; None with one class only
    kappa: float | None  # Cohen's κ of "says right" against the truth
    # The confusion of right vs wrong answers: how each was judged.
    right_judged_right: int
    right_judged_wrong: int
    wrong_judged_right: int
    wrong_judged_wrong: int
    threshold: float
    source: str  # "verifier" or "preferences"
    scores: tuple[tuple[float, bool], ...] = ()  # (score, right) per sample
    parse_failures: int = 0  # replies with no score in them (scored on_parse_failure)

    @property
    def can_tell(self) -> bool | None:
        """Whether the judge tells right from wrong (None: the samples hold only one kind)."""
        if self.auc is None or self.kappa is None:
            return None
        return self.auc >= MIN_AUC and self.kappa >= MIN_KAPPA

    @property
    def verdict(self) -> str:
        if self.can_tell is None:
            return "Cannot check: the samples were all right or all wrong."
        if self.can_tell:
            return f"This judge tells right from wrong (AUC {self.auc:.2f}, κ {self.kappa:.2f})."
        return (
            f"This judge cannot tell right from wrong: AUC {self.auc:.2f} (needs {MIN_AUC}), κ "
            f"{self.kappa:.2f} (needs {MIN_KAPPA}); it judged {self.wrong_judged_right} of "
            f"{self.wrong_judged_right + self.wrong_judged_wrong} wrong answers right. Trained on, its "
            "reward can rise while correctness falls."
        )

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["scores"] = [list(s) for s in self.scores]
        return {**data, "can_tell": self.can_tell, "verdict": self.verdict}


def judge_agreement(
    judge: Any, samples: Sequence[KnownSample], *, source: str, threshold: float = LEARNED_HIGH
) -> JudgeAgreement:
    """Score `samples` with `judge` (an `llm_judge` criterion with its model attached, in one batch) and
    measure its agreement with their truth: accuracy, AUC, Cohen's κ and the confusion."""
    trajectories = [
        Trajectory(
            task=Task(s.task_id or f"check-{i}", s.prompt, s.answer),
            turns=[Turn("user", s.prompt), Turn("assistant", s.response)],
        )
        for i, s in enumerate(samples)
    ]
    results = judge.score_many(trajectories) if trajectories else []
    scores = [float(r.raw) for r in results]
    truth = [s.right for s in samples]
    says = [score >= threshold for score in scores]
    confusion = {
        (t, p): sum(1 for a, b in zip(truth, says, strict=True) if (a, b) == (t, p))
        for t in (True, False)
        for p in (True, False)
    }
    n = len(samples)
    return JudgeAgreement(
        n=n,
        accuracy=(confusion[True, True] + confusion[False, False]) / n if n else None,
        auc=_auc(scores, truth),
        kappa=_kappa(truth, says),
        right_judged_right=confusion[True, True],
        right_judged_wrong=confusion[True, False],
        wrong_judged_right=confusion[False, True],
        wrong_judged_wrong=confusion[False, False],
        threshold=threshold,
        source=source,
        scores=tuple(zip(scores, truth, strict=True)),
        parse_failures=sum(1 for r in results if r.explanation.startswith("No score found")),
    )


def _auc(scores: Sequence[float], truth: Sequence[bool]) -> float | None:
    right = [s for s, t in zip(scores, truth, strict=True) if t]
    wrong = [s for s, t in zip(scores, truth, strict=True) if not t]
    if not right or not wrong:
        return None
    wins = sum((r > w) + 0.5 * (r == w) for r in right for w in wrong)
    return wins / (len(right) * len(wrong))


def _kappa(truth: Sequence[bool], says: Sequence[bool]) -> float | None:
    """Cohen's κ of the judge against the truth; None when the truth is all one class (nothing to tell apart)."""
    if not truth or all(truth) or not any(truth):
        return None
    return cohens_kappa(truth, says)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Generate a check's batch on one torch thread (torch imported only here): the batch is small, and
    two threads contending with other processes on a busy 2-core machine took 18 s for 6 prompts that one
    thread answered in 1.2 s."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def verifier_samples(env: Any, *, tasks: int = SAMPLE_TASKS, seed: int = 0) -> list[KnownSample]:
    """Samples graded by the environment's own verifier: for each of `tasks` held-out tasks, its reference
    answer and another task's answer, written as the environment asks (`<answer>…</answer>`) and graded by
    a one-turn episode's `info["correct"]`. A response the verifier gives no verdict on is left out;
    an environment without a verifier gives none."""
    drawn = [t for t in env.tasks("eval", tasks, seed) if t.answer is not None]
    samples: list[KnownSample] = []
    rng = random.Random(seed)
    for index, task in enumerate(drawn):
        others = [t.answer for t in drawn if str(t.answer) != str(task.answer)]
        candidates = [task.answer, *(rng.sample(others, 1) if others else [])]
        for candidate in candidates:
            response = f"<answer>{candidate}</answer>"
            env.reset(task, seed + index)
            correct = env.step(response).info.get("correct")
            if correct is None:
                continue
            samples.append(KnownSample(task.prompt, response, bool(correct), task.answer, task.id))
    return samples


__all__ = ["JudgeAgreement", "KnownSample", "judge_agreement", "one_thread", "verifier_samples"]
