"""`import {trl,verl,cookbook} PATH` / `import atif FILE…` — the importers on the command line.

    python -m trainers import trl  ./grpo-out   --url http://studio:8000 --token rsu_… --project agents
    python -m trainers import verl ./rollouts   --eval ./validation --project agents --name "verl gsm8k"
    python -m trainers import atif ./jobs/2026-11-23__10-00-00 more.json --project agents
    python -m trainers import cookbook /tmp/tinker-examples/rl-loop --project agents   (a recipe's log_path)
    python -m trainers.importers trl ./grpo-out …        (the same, without the trainers CLI)

`--url` / `--token` default to $ROLLOUT_STUDIO_URL / $ROLLOUT_STUDIO_API_TOKEN. A new external run is
created in the project, unless `--run-id` and `--run-token` name an existing run to append to.
`trainers/__main__.py` mounts this with `add_import_command(subparsers)`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from trainers.sdk.client import Run, Studio, StudioError, attach


def _reward_weights(text: str) -> dict[str, float]:
    weights = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = pair.partition("=")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected name=weight, got {pair!r}") from None
    return weights


def _config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    text = Path(path).read_text(encoding="utf-8")
    if path.endswith((".yaml", ".yml")):
        import yaml

        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: the config must be a mapping")
    return data


def add_import_arguments(parser: argparse.ArgumentParser) -> None:
    kinds = parser.add_subparsers(dest="source", required=True, metavar="{trl,verl,atif,cookbook}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url", default=os.environ.get("ROLLOUT_STUDIO_URL"), help="dashboard URL ($ROLLOUT_STUDIO_URL)"
    )
    common.add_argument(
        "--token",
        default=os.environ.get("ROLLOUT_STUDIO_API_TOKEN"),
        help="your personal API token rsu_… ($ROLLOUT_STUDIO_API_TOKEN)",
    )
    common.add_argument("--project", help="project slug (required unless --run-id)")
    common.add_argument("--name", help="run name (default: the folder's name)")
    common.add_argument("--config", help="a JSON or YAML file with the run's config, kept on the run")
    common.add_argument("--split", choices=("train", "eval"), default="train")
    common.add_argument("--run-id", type=int, help="append to this existing run instead of creating one")
    common.add_argument("--run-token", help="the ingestion token rsr_… of --run-id")
    common.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for delivery at the end"
    )

    trl = kinds.add_parser(
        "trl", parents=[common], help="TRL GRPOTrainer output (completions_*.parquet, trainer_state.json)"
    )
    trl.add_argument("path", help="the trainer's output folder (or one file)")
    trl.add_argument(
        "--reward-weights",
        type=_reward_weights,
        default={},
        help="name=weight,… for the reward columns (TRL's reward_weights; default 1.0 each)",
    )
    trl.add_argument(
        "--reward-columns", help="comma-separated reward columns (default: every numeric column)"
    )
    verl = kinds.add_parser("verl", parents=[common], help="verl rollout_data_dir dumps (<step>.jsonl)")
    verl.add_argument("path", help="the dump folder (or one <step>.jsonl)")
    verl.add_argument(
        "--eval", dest="eval_path", help="also import this validation_data_dir as the eval split"
    )
    atif = kinds.add_parser(
        "atif", parents=[common], help="ATIF trajectories (Harbor): .json / .jsonl files or folders"
    )
    atif.add_argument("paths", nargs="+", metavar="FILE", help="ATIF files, or folders searched for them")
    cookbook = kinds.add_parser(
        "cookbook",
        parents=[common],
        help="a tinker-cookbook recipe's log_path (metrics.jsonl, checkpoints.jsonl)",
    )
    cookbook.add_argument("path", help="the recipe's log_path folder")


def add_import_command(subparsers: Any) -> argparse.ArgumentParser:
    """Mount `import` on another CLI's subparsers; the parsed namespace's `func` runs it."""
    parser = subparsers.add_parser(
        "import", help="import a TRL, verl or tinker-cookbook run, or ATIF trajectories, into the dashboard"
    )
    add_import_arguments(parser)
    parser.set_defaults(func=run_import)
    return parser


def _open_run(args: argparse.Namespace) -> Run:
    if args.run_id is not None:
        if not args.run_token or not args.url:
            raise SystemExit("--run-id needs --run-token and --url")
        return attach(args.url, args.run_id, args.run_token)
    if not args.project:
        raise SystemExit("--project is required (or --run-id / --run-token to append to a run)")
    paths = _paths(args)
    name = args.name or Path(paths[0]).resolve().name
    config = {**_config(args.config), "imported_from": ", ".join(str(Path(p).resolve()) for p in paths)}
    if args.source == "cookbook" and not args.config:
        from trainers.importers.cookbook import recipe_config

        config = {**recipe_config(paths[0]), **config}
    algorithm = {"trl": "trl-grpo", "verl": "verl", "atif": "atif", "cookbook": "tinker-cookbook"}[
        args.source
    ]
    return Studio(args.url, args.token).start_run(
        project=args.project, name=name, config=config, algorithm=algorithm
    )


def _paths(args: argparse.Namespace) -> list[str]:
    return list(args.paths) if args.source == "atif" else [args.path]


def run_import(args: argparse.Namespace) -> int:
    missing = [p for p in _paths(args) if not Path(p).exists()]
    if missing:
        print(f"error: {', '.join(missing)} does not exist", file=sys.stderr)
        return 2
    try:
        run = _open_run(args)
    except StudioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.source == "trl":
        from trainers.importers.trl import import_trl

        columns = [c.strip() for c in args.reward_columns.split(",")] if args.reward_columns else None
        summary = import_trl(
            args.path,
            run,
            reward_columns=columns,
            reward_weights=args.reward_weights,
            split=args.split,
            timeout_s=args.timeout,
        )
    elif args.source == "atif":
        from trainers.importers.atif import import_atif

        summary = import_atif(args.paths, run, split=args.split, timeout_s=args.timeout)
    elif args.source == "cookbook":
        from trainers.importers.cookbook import import_cookbook

        summary = import_cookbook(args.path, run, timeout_s=args.timeout)
    else:
        from trainers.importers.verl import import_verl

        summary = import_verl(
            args.path, run, split=args.split, finish=not args.eval_path, timeout_s=args.timeout
        )
        if args.eval_path:
            evaluation = import_verl(args.eval_path, run, split="eval", timeout_s=args.timeout)
            summary.trajectories += evaluation.trajectories
            summary.metric_points += evaluation.metric_points
            summary.steps = sorted(set(summary.steps) | set(evaluation.steps))
            summary.skipped_files += evaluation.skipped_files
            summary.delivered = summary.delivered and evaluation.delivered
    print(summary.describe())
    return 0 if summary.delivered and run.stats.get("rejected", 0) == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainers.importers", description=__doc__.split("\n\n")[0]
    )
    add_import_arguments(parser)
    return run_import(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
