"""Preferences into training, both routes, on the bundled model: does either beat the base?

    python bench/preference_loop.py [--prompts 24] [--group 4] [--dpo-steps 12] [--grpo-steps 6] [--eval 32]

1. Rollouts of the base model on the arithmetic-with-a-calculator environment (the example config);
   a scripted annotator judges pairs within each group: it prefers the correct answer, and among two
   equally correct ones the shorter (concise) — the `trainers.texts` rendering a preference snapshot uses.
2. Route (a), DPO: TRL's DPOTrainer (`trainers.recipes.dpo.train_dpo`) on those pairs in TRL's conversational
   format, starting from the base model; then held-out accuracy of the DPO checkpoint.
3. Route (b), learned reward: a Bradley–Terry reward model on the same pairs
   (`trainers.learn.reward_training`), gated by `assess_reliability` (Wilson interval, threshold) and used
   bounded (tanh of the z-score) beside the environment's reward in GRPO, twice from the base model: as
   added by default (it counts on every trajectory) and "only when the checks pass" (it counts only where
   the verifiable criteria pass). The reward-hacking alarm (`trainers.rubrics.alarms`) watches both: every
   training trajectory through the flag, the run alarm after every step (as the run page does). If the
   gate refuses the model, GRPO runs once, on the environment reward alone, and the report says so.
4. Held-out accuracy (greedy, the same fixed tasks and seeds) of base, (a) and (b), and wall time of each.

Each phase has its own wall-clock budget (`--minutes`, default 20); a phase that would not fit is cut
short and says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import smoke_parser  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=24, help="training prompts to sample and judge")
    parser.add_argument("--group", type=int, default=4, help="samples per prompt")
    parser.add_argument("--eval", type=int, default=32, help="held-out tasks")
    parser.add_argument("--dpo-steps", type=int, default=12)
    parser.add_argument("--dpo-lr", type=float, default=1e-5)
    parser.add_argument("--grpo-steps", type=int, default=6)
    parser.add_argument("--minutes", type=float, default=20.0, help="budget of each route")
    parser.add_argument("--threshold", type=float, default=0.6, help="reward model reliability threshold")
    parser.add_argument("--out", default=None, help="keep artefacts here (default: a temp dir)")
    smoke_parser(parser, prompts=2, group=2, eval=2, dpo_steps=1, grpo_steps=1, minutes=2.0)
    args = parser.parse_args()

    import transformers

    from trainers.cli import load_config
    from trainers.recipes.dpo import train_dpo
    from trainers.recipes.grpo import Trainer
    from trainers.recipes.reward_model import train_reward_model
    from trainers.rubrics.alarms import run_alarm, trajectory_flag
    from trainers.rubrics.reward_model import assess_reliability
    from trainers.texts import trajectory_text

    transformers.logging.set_verbosity_error()
    out = Path(args.out or tempfile.mkdtemp(prefix="preference-loop-"))
    out.mkdir(parents=True, exist_ok=True)
    base_config = load_config(
        str(ROOT / "trainers" / "examples" / "arithmetic_grpo.yaml"),
        [f"eval_tasks={args.eval}", f"group_size={args.group}", "checkpoint_every=0", "eval_every=0"],
    )
    report: dict = {"settings": vars(args)}

    def accuracy(trainer: Trainer) -> float:
        return 100.0 * trainer.evaluate().get("eval/accuracy", 0.0)

    # --- 1. base: held-out accuracy, and rollouts to judge -------------------------------------------
    t0 = time.perf_counter()
    base = Trainer(dict(base_config))
    base.setup()
    report["base_accuracy"] = accuracy(base)
    print(f"base held-out accuracy {report['base_accuracy']:.1f}%", flush=True)
    tasks = base.sampler.next_tasks(args.prompts)
    seeds = base.sampler.seeds(args.prompts, args.group)
    groups = base.rollouts.generate(
        tasks, seeds, max_turns=base_config["max_turns"], generation_seed=seeds[0][0], policy_version=0
    )
    for group in groups:
        base.sampler.score(group)
    base.rollouts.close()

    def judged(rollout) -> tuple[int, int]:  # the scripted annotator's key: correct first, then concise
        return (1 if rollout.trajectory.info.get("correct") else 0, -rollout.model_tokens)

    conversational, text_pairs = [], []
    for group in groups:
        ranked = sorted(group, key=judged, reverse=True)
        for better, worse in zip(ranked, ranked[1:], strict=False):
            if judged(better) == judged(worse):
                continue
            b = trajectory_text(better.task.prompt, better.trajectory.turns)
            w = trajectory_text(worse.task.prompt, worse.trajectory.turns)
            conversational.append(
                {"prompt": b.prompt_messages, "chosen": b.response_messages, "rejected": w.response_messages}
            )
            text_pairs.append({"prompt": b.prompt, "chosen": b.response, "rejected": w.response})
    sampled_correct = sum(bool(r.trajectory.info.get("correct")) for g in groups for r in g)
    report["pairs"] = len(conversational)
    report["sampled_accuracy"] = 100.0 * sampled_correct / max(1, sum(len(g) for g in groups))
    report["base_minutes"] = (time.perf_counter() - t0) / 60
    print(
        f"{len(conversational)} preference pairs from {args.prompts}×{args.group} rollouts "
        f"({report['sampled_accuracy']:.0f}% correct) in {report['base_minutes']:.1f} min",
        flush=True,
    )
    if len(conversational) < 4:
        print("too few pairs to train on; sample more prompts (--prompts)")
        print(json.dumps(report))
        return

    # --- 2. route (a): DPO ---------------------------------------------------------------------------
    t0 = time.perf_counter()
    dpo = train_dpo(
        conversational,
        {
            "max_steps": args.dpo_steps,
            "batch_size": 4,
            "learning_rate": args.dpo_lr,
            "beta": 0.1,
            "max_length": 384,
            "save_every": 0,
            "device": "cpu",
        },
        out_dir=out / "dpo",
    )
    checkpoint = dpo.checkpoints[-1]
    after_dpo = Trainer({**base_config, "model": checkpoint})
    after_dpo.setup()
    report["dpo_accuracy"] = accuracy(after_dpo)
    after_dpo.rollouts.close()
    report["dpo_minutes"] = (time.perf_counter() - t0) / 60
    report["dpo_metrics"] = {k: dpo.metrics.get(k) for k in ("loss", "rewards/margins", "rewards/accuracies")}
    print(
        f"(a) DPO {dpo.steps} steps: held-out accuracy {report['dpo_accuracy']:.1f}% "
        f"({report['dpo_accuracy'] - report['base_accuracy']:+.1f} points) in {report['dpo_minutes']:.1f} min; "
        f"last loss {dpo.metrics.get('loss'):.3f}, margin {dpo.metrics.get('rewards/margins', 0):.3f}",
        flush=True,
    )

    def grpo_route(label: str, criteria: list[dict], budget_s: float) -> dict:
        """GRPO from the base model with `criteria`; every training group through the hacking flag and the
        run alarm checked after every step, as ingestion and the run page do."""
        started = time.perf_counter()
        rubric = {**base_config["rubric"], "criteria": criteria}
        grpo = Trainer({**base_config, "rubric": rubric, "max_steps": max(args.grpo_steps, 1)})
        grpo.setup()
        counts = {"flagged": 0, "trajectories": 0}
        series: dict[str, list[tuple[int, float]]] = {}
        alarm_step = None
        score = grpo.sampler.score

        def score_and_watch(group) -> None:
            score(group)
            if group and group[0].split == "train":
                counts["trajectories"] += len(group)
                counts["flagged"] += sum(
                    trajectory_flag(r.components, r.trajectory.status) is not None for r in group
                )

        grpo.sampler.score = score_and_watch  # type: ignore[method-assign]
        per_step = []
        for _ in range(args.grpo_steps):
            if time.perf_counter() - started > budget_s * 0.8:
                print(f"  GRPO ({label}) cut short by the budget")
                break
            metrics = grpo.train_step()
            for key, value in metrics.items():
                if (
                    key.startswith("criterion/")
                    and not key.endswith("/weighted")
                    and isinstance(value, float)
                ):
                    series.setdefault(key.removeprefix("criterion/"), []).append((grpo.step, value))
            if alarm_step is None and run_alarm(criteria, series) is not None:
                alarm_step = grpo.step
            per_step.append(
                {
                    k: round(v, 3)
                    for k, v in metrics.items()
                    if k.startswith("criterion/") and isinstance(v, float)
                }
            )
            print(
                f"  GRPO ({label}) step {grpo.step}: reward {metrics['reward/mean']:.3f} {per_step[-1]}",
                flush=True,
            )
        alarm = run_alarm(criteria, series)
        evaluation = grpo.evaluate()
        grpo.rollouts.close()
        return {
            "label": label,
            "steps": grpo.step,
            "accuracy": 100.0 * evaluation.get("eval/accuracy", 0.0),
            "response_length": evaluation.get("eval/response_length", 0.0),
            "tool_calls": evaluation.get("eval/tool_calls", 0.0),
            "minutes": (time.perf_counter() - started) / 60,
            "alarm_step": alarm_step,
            "alarm_at_end": alarm.message if alarm else None,
            "per_step": per_step,
            **counts,
        }

    # --- 3. route (b): reward model (gated, bounded) → GRPO -------------------------------------------
    t0 = time.perf_counter()
    budget = args.minutes * 60
    rm = train_reward_model(text_pairs, out_dir=out / "reward_model", held_out_fraction=0.25, epochs=100)
    reliability = assess_reliability(rm.held_out_accuracy, rm.n_eval, args.threshold)
    report["reward_model"] = {**reliability.as_dict(), "score_scale": rm.score_scale}
    print(f"reward model: {reliability.summary()} → {'reliable' if reliability.reliable else 'NOT reliable'}")
    env_criteria = list(base_config["rubric"]["criteria"])
    variants: list[tuple[str, list[dict]]] = []
    if reliability.reliable:
        learned = {"name": "learned", "kind": "learned_reward", "weight": 0.5}
        params = {"path": str(rm.path), "bounded": True}
        variants.append(("learned reward", [*env_criteria, {**learned, "params": params}]))
        variants.append(
            (
                "learned reward, only when the checks pass",
                [*env_criteria, {**learned, "params": {**params, "only_when_checks_pass": True}}],
            )
        )
    else:
        print(f"  gated out ({reliability.reason}): GRPO runs on the environment reward alone")
        variants.append(("environment reward alone (reward model gated out)", env_criteria))
    report["grpo"] = []
    for label, criteria in variants:
        result = grpo_route(label, criteria, budget - (time.perf_counter() - t0))
        report["grpo"].append(result)
        print(
            f"(b) GRPO {result['steps']} steps, {label}: held-out accuracy {result['accuracy']:.1f}% "
            f"({result['accuracy'] - report['base_accuracy']:+.1f} points), mean response "
            f"{result['response_length']:.0f} tokens, in {result['minutes']:.1f} min; run alarm: "
            f"{'from step ' + str(result['alarm_step']) if result['alarm_step'] else 'did not fire'}; "
            f"{result['flagged']} of {result['trajectories']} training trajectories flagged",
            flush=True,
        )
    report["grpo_minutes"] = (time.perf_counter() - t0) / 60
    print(json.dumps(report, default=str))


if __name__ == "__main__":
    main()
