"""What the training loop tells the dashboard, apart from the loop itself: its log lines (a step summary, an
evaluation summary), its phase line (with generation progress and a library's progress bars folded in),
and its rollouts in the wire format — each training group as soon as it is scored, before the update.

Everything goes out through one `EventSink` (`trainers.sdk.events`); no Django here.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from trainers.learn import token_stats
from trainers.learn.learner import assign_advantages
from trainers.learn.step import loss_mask
from trainers.parts import build_part
from trainers.rollout.episodes import Rollout
from trainers.run_config import RunConfig
from trainers.sdk import wire
from trainers.sdk.events import REPORTED, EventSink, PhaseClock, make_event

log = logging.getLogger("trainers.recipes.grpo")  # the trainer's own log lines, under its name

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class RunEvents:
    """The run's events: `emit`, `log`, `phase`, and the progress that reaches the phase line."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self._phases = PhaseClock()
        self._phase_words: tuple[str, int | None, int, int, str] | None = None
        self._last_bar = 0.0

    def emit(self, type_: str, **fields: Any) -> None:
        self.sink.emit(make_event(type_, **fields))

    def log(self, message: str, level: str = "info") -> None:
        # extra: not forwarded to the run's log a second time
        log.log(LEVELS.get(level, logging.INFO), message, extra={REPORTED: True})
        self.emit("log", level=level, message=message)

    def phase(self, name: str, step: int | None, *, done: int = 0, total: int = 0, message: str = "") -> None:
        """Tell the run page what the trainer is doing now (`trainers.sdk.wire.PHASES`). A call with the phase
        and step already under way is a progress update: it keeps the phase's clock running."""
        self._phase_words = (name, step, done, total, message)  # what a library's progress bar is added to
        self.sink.emit(self._phases.event(name, step, done=done, total=total, message=message))

    def generation_progress(self, turn: int, done: int, total: int) -> None:
        if self._phases.current is not None:
            name, step, _ = self._phases.current
            self.phase(
                name, step, done=done, total=total, message=f"turn {turn}: {done} of {total} groups done"
            )

    def library_progress(self, bar: str) -> None:
        """A library's progress bar ("Loading weights 100/272 (37%)"), shown on the phase line (at most about
        once a second) instead of in the log."""
        now = time.perf_counter()
        if self._phase_words is None or (now - self._last_bar < 1.0 and not bar.endswith("(100%)")):
            return
        self._last_bar = now
        name, step, done, total, words = self._phase_words
        message = f"{words} · {bar}" if words else bar
        self.sink.emit(self._phases.event(name, step, done=done, total=total, message=message))

    def step_summary(self, step: int, max_steps: int, metrics: dict[str, float]) -> None:
        """One log line per step: what a researcher scans the log for."""
        parts = [f"step {step}/{max_steps}"]
        if "reward/mean" in metrics:
            parts.append(f"reward {metrics['reward/mean']:.3f} ± {metrics.get('reward/std', 0.0):.3f}")
        if "accuracy" in metrics:
            parts.append(f"accuracy {metrics['accuracy']:.3f}")
        timings = {
            name: sum(metrics.get(f"time/{key}", 0.0) for key in keys)
            for name, keys in wire.STEP_TIME_PARTS.items()
        }
        spent = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in timings.items() if seconds > 0)
        parts.append(f"{metrics.get('step_time', 0.0):.1f} s" + (f" ({spent})" if spent else ""))
        self.log(f"{parts[0]}: {', '.join(parts[1:])}")

    def evaluation_summary(self, step: int, metrics: dict[str, float], count: int) -> None:
        """One log line per evaluation: its accuracy and mean reward on the held-out tasks."""
        parts = []
        if "eval/accuracy" in metrics:
            parts.append(f"accuracy {metrics['eval/accuracy']:.3f}")
        if "eval/reward/mean" in metrics:
            parts.append(
                f"reward {metrics['eval/reward/mean']:.3f} ± {metrics.get('eval/reward/std', 0.0):.3f}"
            )
        parts.append(
            f"{count} held-out task{'s' if count != 1 else ''}, {metrics.get('eval/time', 0.0):.1f} s"
        )
        self.log(f"evaluation at step {step}: {', '.join(parts)}")


def trajectory_item(rollout: Rollout, mask: list[int], learner: Any) -> dict[str, Any]:
    """A rollout in the wire format, with its token statistics when the run reports them."""
    item = rollout.to_item()
    recorder = learner.recorder
    if recorder is not None:
        token_stats.add_to_item(item, rollout, loss_mask=mask, recorder=recorder, tokenizer=learner.tokenizer)
    return item


class GroupReporter:
    """Sends each training group to the feed and the explorer as soon as the sampler has scored it, with
    its advantages (as it will be trained on) or marked dropped (dynamic sampling found no signal in it).
    Where the advantages are whitened over the whole batch they are known only once every group is scored:
    those groups wait for `finish`. One `trajectories` event per group, so the dashboard stores each as it
    arrives."""

    def __init__(self, config: RunConfig, events: RunEvents, learner: Any) -> None:
        self.config, self.events, self.learner = config, events, learner
        # The run's advantage estimator (trainers.parts), built once.
        self.estimator = build_part("advantage_estimator", config)
        self.step = 0
        self._waiting: list[list[Rollout]] = []

    def start(self, step: int) -> None:
        self.step, self._waiting = step, []

    def scored(self, group: list[Rollout], kept: bool) -> None:
        cfg = self.config
        if not kept:
            self._send(group, dropped=True)
        elif getattr(self.estimator, "group_local", False):
            assign_advantages([group], cfg, self.estimator)
            self._send(group)
        else:
            self._waiting.append(group)

    def finish(self, kept: list[list[Rollout]]) -> None:
        """Every group is scored: the advantages over the batch, and the groups that waited for them."""
        assign_advantages(kept, self.config, self.estimator)
        for group in self._waiting:
            self._send(group)
        self._waiting = []

    def _send(self, group: list[Rollout], *, dropped: bool = False) -> None:
        items = []
        for r in group:
            item = trajectory_item(r, loss_mask(self.config, r), self.learner)
            if dropped:
                item["dropped"] = True  # a zero-variance group removed by dynamic sampling
            items.append(item)
        self.events.emit("trajectories", step=self.step, items=items)


def judge_metrics(rubric: Any, judges: Any, prefix: str) -> dict[str, float]:
    """What the LLM judges cost since the last read (calls, tokens, seconds): one set per step."""
    if judges is None:
        return {}
    from trainers.rubrics.judge_models import judge_usage_metrics

    return {f"{prefix}{key}": value for key, value in judge_usage_metrics(rubric).items()}
