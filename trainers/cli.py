"""Command line: `python -m trainers train|eval|presets|schema`.

    python -m trainers train CONFIG.yaml [--out DIR] [--resume CKPT] [--set key=value ...]
                                         [--report-to URL --token T --run-id N]
    python -m trainers eval CONFIG.yaml [--checkpoint CKPT] [--out DIR]
    python -m trainers dpo PAIRS.jsonl [--out DIR] [--resume CKPT] [--set key=value ...]
    python -m trainers presets           # the presets table
    python -m trainers schema            # RUN_CONFIG_SCHEMA as JSON

Events always go to `<out>/events.jsonl` (cancel a run by creating `<out>/events.jsonl.cancel`);
`--report-to` also streams them to a Rollout Studio dashboard through `trainers.sdk.reporting.HttpSink`.
Progress shows as a bar on a terminal and as one plain line per step otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import yaml

from trainers.config import PRESETS, RUN_CONFIG_SCHEMA, resolve_run_config, validate_run_config
from trainers.sdk.events import JsonlSink, MultiSink


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML reads YAML 1.1, where `2e-5` (no dot) is a string; every config writer means the number
    (YAML 1.2, JSON, Python). This loader reads such exponents as floats."""


_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_yaml(text: str) -> Any:
    """A run config or a `--set` value, with `2e-5` read as a number."""
    return yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 — a SafeLoader subclass


class CliError(Exception):
    pass


def load_config(path: str | Path, assignments: list[str] | None = None) -> dict[str, Any]:
    """Read a YAML (or JSON) run config, apply `key=value` overrides (dotted keys, YAML values), resolve."""
    try:
        raw = read_yaml(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise CliError(f"cannot read config {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise CliError(f"{path}: a run config is a mapping of knobs")
    for assignment in assignments or []:
        key, sep, value = assignment.partition("=")
        if not sep or not key:
            raise CliError(f"--set expects key=value, got {assignment!r}")
        target = raw
        *parents, leaf = key.split(".")
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = read_yaml(value)
    try:
        config = resolve_run_config(raw.get("preset"), raw)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    errors = validate_run_config(config)
    if errors:
        lines = "\n".join(
            f"  {path or '(config)'}: {'; '.join(messages)}" for path, messages in errors.items()
        )
        raise CliError(f"invalid run config {path}:\n{lines}")
    return config


class ProgressSink:
    """Shows training progress: a tqdm bar on a terminal, plain lines otherwise. Sends no control."""

    def __init__(self, total_steps: int, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.total = total_steps
        self.tty = self.stream.isatty() if tty is None else tty
        self.bar = None
        if self.tty:
            from tqdm import tqdm

            self.bar = tqdm(total=total_steps, file=self.stream, unit="step", dynamic_ncols=True)

    def emit(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "metrics":
            values = event.get("values", {})
            if event.get("split") == "eval":
                self._line(
                    f"eval @ step {event['step']}: "
                    + _summary(
                        values, ("eval/reward/mean", "eval/accuracy", "eval/dpo/accuracy", "eval/dpo/margin")
                    )
                )
                return
            summary = _summary(
                values,
                (
                    "reward/mean",
                    "accuracy",
                    "loss",
                    "dpo/margin",
                    "dpo/accuracy",
                    "kl",
                    "entropy",
                    "step_time",
                ),
            )
            if self.bar is not None:
                self.bar.n = event["step"]
                self.bar.set_postfix_str(summary, refresh=True)
            else:
                self._line(f"step {event['step']}/{self.total} {summary}")
        elif kind == "status":
            self._line(f"{event['status']}: {event.get('message', '')}")
            if event["status"] != "RUNNING" and event.get("traceback"):
                self._line(event["traceback"])
        elif kind == "checkpoint":
            self._line(f"checkpoint ({event.get('kind')}) at step {event['step']}: {event['path']}")
        elif kind == "log" and event.get("level") in ("warning", "error"):
            self._line(f"{event['level']}: {event['message']}")

    def _line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def control(self) -> dict[str, Any]:
        return {}


def _summary(values: dict[str, Any], keys: tuple[str, ...]) -> str:
    """`name=value` for the keys present, each named by its metric name less `eval/` (the line says it is
    an evaluation) and `/mean`: `reward=…`, `accuracy=…` (a task's), `dpo/accuracy=…` (a preference's)."""
    parts = []
    for key in keys:
        value = values.get(key)
        if isinstance(value, (int, float)):
            name = key.removeprefix("eval/").removesuffix("/mean")
            parts.append(f"{name}={value:.3g}")
    return " ".join(parts)


def _http_sink(url: str, token: str | None, run_id: int | None) -> Any:
    try:
        from trainers.sdk.reporting import HttpSink
    except ImportError as exc:
        raise CliError(
            f"--report-to needs trainers.sdk.reporting.HttpSink, which is not importable: {exc}"
        ) from exc
    if not token:
        token = os.environ.get("ROLLOUT_STUDIO_TOKEN")
    if not token:
        raise CliError("--report-to needs --token (or ROLLOUT_STUDIO_TOKEN)")
    match = re.search(r"/api/runs/(\d+)", url)
    if run_id is None and match:
        run_id, url = int(match.group(1)), url[: match.start()]
    if run_id is None and os.environ.get("ROLLOUT_STUDIO_RUN_ID"):
        run_id = int(os.environ["ROLLOUT_STUDIO_RUN_ID"])
    if run_id is None:
        raise CliError("--report-to needs --run-id (or a URL ending in /api/runs/<id>)")
    return HttpSink(url, run_id, token)


def _default_out(config_path: str) -> Path:
    return Path("runs") / f"{Path(config_path).stem}-{time.strftime('%Y%m%d-%H%M%S')}"


def cmd_train(args: argparse.Namespace) -> int:
    from trainers.recipes.grpo import Trainer

    config = load_config(args.config, args.set)
    out = Path(args.out) if args.out else _default_out(args.config)
    out.mkdir(parents=True, exist_ok=True)
    (out / "run_config.json").write_text(json.dumps(config, indent=2))
    sinks: list[Any] = [JsonlSink(out / "events.jsonl"), ProgressSink(config["max_steps"])]
    if args.report_to:
        sinks.append(_http_sink(args.report_to, args.token, args.run_id))
    sink = MultiSink(*sinks)
    try:
        result = Trainer(config, sink=sink, out_dir=out, resume_from=args.resume).run()
    except KeyboardInterrupt:
        return 130
    except Exception:  # noqa: BLE001 — already reported as a FAILED status event (with traceback)
        return 1
    finally:
        sink.close()
    print(
        json.dumps(
            {"status": result.status, "step": result.step, "checkpoint": result.checkpoint, "out": str(out)}
        )
    )
    return 0 if result.status in ("SUCCEEDED", "CANCELLED") else 1


def cmd_eval(args: argparse.Namespace) -> int:
    from trainers.recipes.evaluation import evaluate

    # A checkpoint is a model (trainers/learn/checkpoint.py), LoRA or not: the policy evaluated is it.
    config = load_config(args.config, [*args.set, *([f"model={args.checkpoint}"] if args.checkpoint else [])])
    if not config["eval_tasks"]:
        raise CliError("eval_tasks is 0: nothing to evaluate")
    sinks: list[Any] = [ProgressSink(0)]
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        sinks.append(JsonlSink(Path(args.out) / "events.jsonl"))
    sink = MultiSink(*sinks)
    try:
        metrics = evaluate(config, sink=sink)  # the checkpoint is the config's model (above)
    finally:
        sink.close()
    print(json.dumps(metrics, indent=2, sort_keys=True))
    return 0


def _pairs_and_knobs(args: argparse.Namespace) -> tuple[list[Any], dict[str, Any]]:
    """The JSON lines of `args.pairs` and the `--set key=value` knobs (values read as YAML)."""
    try:
        records = [json.loads(line) for line in Path(args.pairs).read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read pairs {args.pairs}: {exc}") from exc
    knobs: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--set wants key=value, not {item!r}")
        knobs[key] = read_yaml(value)
    return records, knobs


def cmd_dpo(args: argparse.Namespace) -> int:
    """DPO on a JSONL of preference pairs (prompt / chosen / rejected, text or chat messages: a snapshot's
    "DPO JSON lines" download); `--set model=<checkpoint directory>` starts from any run's checkpoint."""
    from trainers.learn.dpo import DPOConfigError, dpo_config
    from trainers.recipes.dpo import train_dpo

    records, knobs = _pairs_and_knobs(args)
    try:
        max_steps = dpo_config(knobs)["max_steps"]
    except DPOConfigError as exc:
        raise CliError(str(exc)) from exc
    out = Path(args.out) if args.out else _default_out(args.pairs)
    out.mkdir(parents=True, exist_ok=True)
    sink = MultiSink(JsonlSink(out / "events.jsonl"), ProgressSink(max_steps))
    try:
        result = train_dpo(records, knobs, out_dir=out, sink=sink, resume_from=args.resume)
    except KeyboardInterrupt:
        return 130
    except DPOConfigError as exc:
        raise CliError(str(exc)) from exc
    except Exception:  # noqa: BLE001 — already reported as a FAILED status event (with traceback)
        return 1
    finally:
        sink.close()
    last = result.checkpoints[-1] if result.checkpoints else None
    print(json.dumps({"status": result.status, "step": result.steps, "checkpoint": last, "out": str(out)}))
    return 0


def cmd_reward_model(args: argparse.Namespace) -> int:
    """A Bradley–Terry reward model on a JSONL of text preference pairs (a snapshot's "reward-model pairs"
    download); `--set model=<checkpoint directory>` embeds with any run's checkpoint as the frozen base."""
    from trainers.learn.reward_training import TRAINING_SCHEMA, PreferenceDataError
    from trainers.recipes.reward_model import train_reward_model
    from trainers.registry import validate_config

    records, knobs = _pairs_and_knobs(args)
    model = knobs.pop("model", None)
    errors = validate_config(TRAINING_SCHEMA, knobs)
    if errors:
        raise CliError("; ".join(f"{field}: {' '.join(messages)}" for field, messages in errors.items()))
    out = Path(args.out) if args.out else _default_out(args.pairs)
    try:
        result = train_reward_model(records, out_dir=out, **({"model": model} if model else {}), **knobs)
    except (PreferenceDataError, ValueError) as exc:
        raise CliError(str(exc)) from exc
    print(json.dumps(result.metrics(), sort_keys=True))
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    keys = sorted({k for preset in PRESETS.values() for k in preset})
    print("knob".ljust(20) + "".join(name.ljust(26) for name in PRESETS))
    for key in keys:
        print(key.ljust(20) + "".join(str(PRESETS[name].get(key, "")).ljust(26) for name in PRESETS))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(RUN_CONFIG_SCHEMA, indent=2))
    return 0


def cmd_preview(args: argparse.Namespace) -> int:
    from trainers.envs.preview import preview_environment

    config: dict[str, Any] = {}
    if args.config:
        loaded = read_yaml(Path(args.config).read_text(encoding="utf-8")) or {}
        # A run config file (its `environment` section) or an environment config on its own.
        config = loaded.get("environment", {}).get("config", {}) if "environment" in loaded else loaded
    for item in args.set:
        key, _, value = item.partition("=")
        config[key] = read_yaml(value)
    result = preview_environment(args.kind, config)
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0 if result["ok"] else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainers", description="Rollout Studio trainer")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train from a YAML run config")
    train.add_argument("config")
    train.add_argument("--out", help="run directory (events.jsonl, checkpoints/); default runs/<name>-<time>")
    train.add_argument("--resume", help="checkpoint directory to continue from")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a knob")
    train.add_argument("--report-to", help="dashboard URL to stream events to")
    train.add_argument("--token", help="per-run ingestion token (or ROLLOUT_STUDIO_TOKEN)")
    train.add_argument("--run-id", type=int, help="dashboard run id (or ROLLOUT_STUDIO_RUN_ID)")
    train.set_defaults(func=cmd_train)
    evaluate = sub.add_parser("eval", help="score the held-out set with a checkpoint (or the base model)")
    evaluate.add_argument("config")
    evaluate.add_argument("--checkpoint", help="checkpoint directory; omit for the base model")
    evaluate.add_argument("--out", help="write events.jsonl here")
    evaluate.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a knob")
    evaluate.set_defaults(func=cmd_eval)
    dpo = sub.add_parser("dpo", help="DPO on a JSONL of preference pairs (any checkpoint as the model)")
    dpo.add_argument("pairs", help="JSON lines of {prompt, chosen, rejected}")
    dpo.add_argument("--out", help="run directory (events.jsonl, checkpoints/); default runs/<name>-<time>")
    dpo.add_argument("--resume", help="checkpoint directory of a DPO run to continue")
    dpo.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a DPO knob")
    dpo.set_defaults(func=cmd_dpo)
    reward = sub.add_parser(
        "reward-model",
        help="a Bradley-Terry reward model on a JSONL of preference pairs (any checkpoint as base)",
    )
    reward.add_argument("pairs", help="JSON lines of {prompt, chosen, rejected} texts")
    reward.add_argument("--out", help="the reward model's directory; default runs/<name>-<time>")
    reward.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a training knob, or model="
    )
    reward.set_defaults(func=cmd_reward_model)
    preview = sub.add_parser(
        "preview", help="show what the model would see with an environment config (or why not)"
    )
    preview.add_argument("kind", help="an environment kind, e.g. reasoning_gym")
    preview.add_argument("config", nargs="?", help="a YAML/JSON environment config, or a run config")
    preview.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="set a config field")
    preview.set_defaults(func=cmd_preview)
    sub.add_parser("presets", help="print the algorithm presets").set_defaults(func=cmd_presets)
    sub.add_parser("schema", help="print the run config JSON schema").set_defaults(func=cmd_schema)
    from trainers.importers.cli import add_import_command  # `import {trl,verl} PATH`: other trainers' runs

    add_import_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "WARNING"))
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
