"""Does training help? Held-out accuracy before and after a bounded CPU run.

    python bench/learning.py [--minutes 30] [--config trainers/examples/arithmetic_grpo.yaml] [--set k=v ...]
    python bench/learning.py --env reasoning_gym:basic_arithmetic [--minutes 30]
    python bench/learning.py --judge [--minutes 30]

`--judge` runs `trainers/examples/judge_grpo.yaml`: the reward is an LLM judge (the bundled model, loaded
once, grading each answer against the reference), and held-out accuracy is reasoning-gym's own check,
which the reward never sees; the judge's cost (calls, tokens, seconds per step) is printed at the end.
Before training it runs the judge check (trainers/rubrics/judge_check.py: the judge's agreement with the
environment's verifier on right and wrong answers), and during training it watches the reward-hacking
alarm (trainers/rubrics/alarms.py, what the run page shows): the step it fires at and its message are
printed, and `--stop-on-alarm` ends the run there as `stop_on_hacking_alarm` does. `--quick` is the
bench's quick size (6 minutes, an evaluation every 5 steps on 32 held-out tasks).

`--env reasoning_gym:<task>` runs `trainers/examples/reasoning_gym_grpo.yaml` on that reasoning-gym
task (the file's generator options apply only to its own task, basic_arithmetic; another task gets
its generator's defaults).

Evaluates the fixed held-out set (greedy, fixed seed) before training, every `eval_every` steps and
at the end, within a wall-clock budget that counts everything after the model is loaded (training
and evaluation). Prints the curve; the last line is the before → after figure.
Goal: +20 points of held-out accuracy within 30 minutes on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import smoke_parser  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--config",
        default=None,
        help="run config (default: arithmetic_grpo.yaml, or reasoning_gym_grpo.yaml with --env)",
    )
    parser.add_argument(
        "--env",
        default=None,
        metavar="reasoning_gym:TASK",
        help="train on a reasoning-gym task instead of the config's environment",
    )
    parser.add_argument(
        "--judge", action="store_true", help="reward with an LLM judge (trainers/examples/judge_grpo.yaml)"
    )
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--events", help="also write the run's events to this JSONL file")
    parser.add_argument(
        "--stop-on-alarm", action="store_true", help="stop when the reward-hacking alarm fires"
    )
    parser.add_argument("--quick", action="store_true", help="6 minutes, eval every 5 steps on 32 tasks")
    smoke_parser(parser, minutes=1.0)
    args = parser.parse_args()
    if args.quick:
        args.minutes = min(args.minutes, 6.0)
        args.set = ["eval_every=5", "eval_tasks=32", *args.set]

    import transformers
    import yaml

    from trainers.cli import load_config
    from trainers.recipes.grpo import Trainer
    from trainers.rubrics.alarms import AlarmWatch
    from trainers.sdk.events import JsonlSink, NullSink

    transformers.logging.set_verbosity_error()
    examples = ROOT / "trainers" / "examples"
    assignments = list(args.set)
    if args.judge:
        args.config = args.config or str(examples / "judge_grpo.yaml")
    if args.env:
        kind, _, task = args.env.partition(":")
        if kind != "reasoning_gym" or not task:
            parser.error("--env takes reasoning_gym:<task>, e.g. reasoning_gym:basic_arithmetic")
        args.config = args.config or str(examples / "reasoning_gym_grpo.yaml")
        assignments.insert(0, f"environment.config.dataset={task}")
        own = (yaml.safe_load(Path(args.config).read_text()).get("environment") or {}).get("config", {})
        if task != own.get("dataset"):
            assignments.insert(1, "environment.config.dataset_config={}")
    config = load_config(args.config or str(examples / "arithmetic_grpo.yaml"), assignments)
    env = config["environment"]
    print(f"environment {env['kind']} {env['config'].get('dataset', '')}".rstrip(), flush=True)
    criteria = (config.get("rubric") or {}).get("criteria") or []
    print(
        "rubric " + ", ".join(f"{c['name']} ({c['kind']} ×{c.get('weight', 1.0):g})" for c in criteria),
        flush=True,
    )
    judge_cost: dict[str, list[float]] = {}
    # The budget ends the run, not max_steps: past max_steps the train task list starts over. (max_steps
    # still sets the length of the environment's easy-to-hard curriculum.)
    sink = JsonlSink(args.events) if args.events else NullSink()
    trainer = Trainer(config, sink=sink)
    trainer.setup()
    check_judges(trainer, config)
    watch = AlarmWatch(criteria)
    fired: list[tuple[int, str]] = []
    budget = args.minutes * 60
    started = time.perf_counter()

    def accuracy(metrics: dict) -> float:
        return 100.0 * metrics.get("eval/accuracy", 0.0)

    curve = []
    before = trainer.evaluate()
    watch.observe(0, before)
    curve.append((0, time.perf_counter() - started, None, accuracy(before), before["eval/reward/mean"]))
    print(f"{'step':>5} {'minutes':>8} {'train reward':>13} {'eval acc %':>11} {'eval reward':>12}")
    print(
        f"{0:>5} {curve[-1][1] / 60:>8.1f} {'':>13} {curve[-1][3]:>11.1f} {curve[-1][4]:>12.3f}", flush=True
    )
    eval_every = config["eval_every"] or 10
    # Stop early enough that the final evaluation still fits in the budget.
    eval_cost = curve[-1][1]
    last_reward = None
    step_cost = 0.0
    # Another step only when it and the final evaluation should still fit (costs of the last ones).
    while time.perf_counter() - started + step_cost + eval_cost < budget:
        step_started = time.perf_counter()
        metrics = trainer.train_step()
        last_reward = metrics["reward/mean"]
        for key, value in metrics.items():
            if key.startswith("judge/"):
                judge_cost.setdefault(key, []).append(value)
        step_cost = time.perf_counter() - step_started
        alarm = watch.observe(trainer.step, metrics)
        print(
            f"{trainer.step:>5} {(time.perf_counter() - started) / 60:>8.1f} {last_reward:>13.3f}"
            f"   (acc {100 * metrics.get('accuracy', 0):.0f}%, tool calls {metrics['tool_calls']:.2f}, "
            f"{step_cost:.1f}s)",
            flush=True,
        )
        if trainer.step % eval_every == 0 and time.perf_counter() - started + eval_cost + step_cost < budget:
            t0 = time.perf_counter()
            result = trainer.evaluate()
            eval_cost = time.perf_counter() - t0
            curve.append(
                (
                    trainer.step,
                    time.perf_counter() - started,
                    last_reward,
                    accuracy(result),
                    result["eval/reward/mean"],
                )
            )
            print(
                f"{trainer.step:>5} {curve[-1][1] / 60:>8.1f} {last_reward:>13.3f} {curve[-1][3]:>11.1f} "
                f"{curve[-1][4]:>12.3f}  <- eval",
                flush=True,
            )
            alarm = watch.observe(trainer.step, result) or alarm
        if report_alarm(alarm, trainer.step, fired) and args.stop_on_alarm:
            break
    if curve[-1][0] != trainer.step:
        result = trainer.evaluate()
        curve.append(
            (
                trainer.step,
                time.perf_counter() - started,
                last_reward,
                accuracy(result),
                result["eval/reward/mean"],
            )
        )
    trainer.rollouts.close()
    sink.close()
    print(
        "\ncurve (step, minutes, held-out accuracy %):",
        json.dumps([(s, round(t / 60, 1), round(a, 1)) for s, t, _, a, _ in curve]),
    )
    for name in sorted({key.split("/")[1] for key in judge_cost}):
        per_step = {
            part: sum(judge_cost.get(f"judge/{name}/{part}", [0.0]))
            / max(len(judge_cost.get(f"judge/{name}/{part}", [])), 1)
            for part in ("calls", "tokens", "seconds")
        }
        print(
            f"judge {name!r} per training step: {per_step['calls']:.1f} calls, {per_step['tokens']:.0f} tokens, "
            f"{per_step['seconds']:.1f} s"
        )
    if fired:
        print(f"reward-hacking alarm first at step {fired[0][0]}: {fired[0][1]}")
    elif watch.names:
        print("reward-hacking alarm: never on")
    first, last = curve[0], curve[-1]
    print(
        f"held-out accuracy {first[3]:.1f}% -> {last[3]:.1f}% ({last[3] - first[3]:+.1f} points) after "
        f"{last[0]} steps in {last[1] / 60:.1f} minutes on {len(trainer.sampler.eval_tasks)} held-out tasks"
    )


def check_judges(trainer, config) -> None:
    """The judge check before training: each LLM judge of the rubric (its model already loaded by the
    trainer) on held-out tasks answered right and wrong, graded by the environment's verifier."""
    from trainers.registry import environment_kind
    from trainers.rubrics.judge_check import judge_agreement, one_thread, verifier_samples
    from trainers.rubrics.judge_models import judge_criteria

    judges = judge_criteria(trainer.rubric)
    if not judges:
        return
    env = config["environment"]
    samples = verifier_samples(environment_kind(env["kind"]).build(env["config"]), tasks=4)
    for name, judge in judges:
        started = time.perf_counter()
        with one_thread():
            a = judge_agreement(judge, samples, source="verifier")
        judge.take_usage()  # the check's cost is not the first step's
        print(
            f"judge check {name!r} ({time.perf_counter() - started:.1f} s, {a.n} answers graded by the "
            f"verifier): accuracy {a.accuracy:.2f}, AUC {a.auc}, kappa {a.kappa}; right answers judged right "
            f"{a.right_judged_right}/{a.right_judged_right + a.right_judged_wrong}, wrong answers judged right "
            f"{a.wrong_judged_right}/{a.wrong_judged_right + a.wrong_judged_wrong}. {a.verdict}",
            flush=True,
        )


def report_alarm(alarm, step: int, fired: list) -> bool:
    """Print the reward-hacking alarm the first time it is on (and when it changes); True while it is on."""
    if alarm is None:
        return False
    if not fired or fired[-1][1] != alarm.message:
        print(f"  !! step {step}: {alarm.message}", flush=True)
        fired.append((step, alarm.message))
    return True


if __name__ == "__main__":
    main()
