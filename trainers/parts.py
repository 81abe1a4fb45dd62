"""Registered parts of a training run: advantage estimators, losses, rollout strategies and task sources.

A run config names one part of each kind by a knob (`PART_KNOBS`: `algorithm`, `policy_loss`,
`rollout_strategy`, `curriculum`) and may give the chosen parts options (`part_options`, `{kind: {...}}`,
checked against the part's own JSON schema). The trainer builds each chosen part once from here
(`build_part`) and calls it; nothing else decides which code a name runs.

A part is a `Part`: its kind, name, title, description (what the form and the API show), the JSON schema
of its options, and `target`, the "package.module:attr" of a factory imported only when the part is built:
`factory(config, options)` with the typed run config (`trainers.run_config.RunConfig`) and the options
with their schema defaults filled in. What the built object must have, per kind:

- advantage_estimator: `advantages(rewards: list[list[float]]) -> list[list[float]]` (one value per
  completion, shaped like the groups of rewards), and `group_local: bool` — True when a group's advantages
  depend on that group alone, so it is shown on the dashboard as soon as it is scored (default False);
- loss: called as `loss(logp, old_logp, advantages, mask, *, ref_logp, is_weights, num_sequences,
  num_tokens, norm_constant) -> (scalar loss, trainers.learn.losses.LossStats)` (the tensors as
  `trainers.learn.losses.policy_loss` takes them);
- rollout_strategy: `generate(backend, chat, make_env, tasks, seeds, **options) -> list[list[Rollout]]`,
  the arguments and result of `trainers.rollout.episodes.generate_rollouts` (a group per task; `split`
  says "train" or "eval");
- task_source: `attach(trainer) -> None`, called once the trainer's sampler exists
  (`trainers.learn.curriculum.attach_curriculum` shows how one replaces `sampler.next_tasks`).

The built-ins are declared in `BUILTIN_PARTS` and registered the same way as a plugin's: an installed
package adds its own through the entry point group `rollout_studio.parts`, each entry point loading a
`Part` or a list of them (tests/fixtures/rs_example_parts is one). The group is read once per process; a
plugin that fails to load, or that reuses a built-in's name, is a warning in the log, never a crash.

Importing this module is cheap (no torch): the web process lists and validates parts with it.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import logging
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import EntryPoint, PackageNotFoundError, entry_points, version
from typing import Any

from trainers.kinds import config_with_defaults, validate_config

log = logging.getLogger(__name__)

PARTS_ENTRY_POINTS = "rollout_studio.parts"

# Each kind of part and the run-config knob that names the run's choice of it.
PART_KNOBS: dict[str, str] = {
    "advantage_estimator": "algorithm",
    "loss": "policy_loss",
    "rollout_strategy": "rollout_strategy",
    "task_source": "curriculum",
}
PART_KINDS = tuple(PART_KNOBS)
KIND_TITLES = {
    "advantage_estimator": "Advantage estimator",
    "loss": "Loss",
    "rollout_strategy": "Rollout strategy",
    "task_source": "Task source",
}

NO_OPTIONS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
BUILTIN_SOURCE = "rollout-studio"


def _studio_version() -> str:
    try:
        return version(BUILTIN_SOURCE)
    except PackageNotFoundError:  # a source checkout that is not installed
        return "0"


@dataclass(frozen=True)
class Part:
    """One registered part (see the module docstring for what its target builds)."""

    kind: str
    name: str
    title: str
    description: str
    target: str  # "package.module:factory", imported when the part is built
    options_schema: Mapping[str, Any] = field(default_factory=lambda: dict(NO_OPTIONS))
    # Filled in by the registry: the distribution the part came from and its version.
    source: str = BUILTIN_SOURCE
    version: str = ""

    def describe(self) -> dict[str, Any]:
        """The part as JSON: what a worker reports with its heartbeat and the API lists."""
        return {
            "kind": self.kind,
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "options_schema": dict(self.options_schema),
            "source": self.source,
            "version": self.version,
        }

    def build(self, config: Any, options: Mapping[str, Any] | None = None) -> Any:
        """The part for a run: its factory called with the typed config and the options (defaults filled)."""
        given = dict(options or {})
        errors = validate_config(dict(self.options_schema), given)
        if errors:
            raise ValueError(f"invalid options for the {self.kind} {self.name!r}: {errors}")
        module_name, _, attr = self.target.partition(":")
        factory = getattr(importlib.import_module(module_name), attr)
        return factory(config, config_with_defaults(dict(self.options_schema), given))


def builtin(kind: str, name: str, title: str, description: str, target: str) -> Part:
    """A built-in part (no options of its own: the run config's knobs configure it)."""
    return Part(kind, name, title, description, target, version=_studio_version())


_ESTIMATOR = "trainers.learn.algorithms:BuiltinEstimator"
BUILTIN_PARTS: tuple[Part, ...] = (
    builtin(
        "advantage_estimator",
        "grpo",
        "GRPO",
        "Group mean baseline scaled by the group's std (DeepSeekMath). Reads scale_rewards and "
        "advantage_epsilon.",
        _ESTIMATOR,
    ),
    builtin(
        "advantage_estimator",
        "dr_grpo",
        "Dr. GRPO",
        "Group mean baseline, no std scaling (difficulty bias removed).",
        _ESTIMATOR,
    ),
    builtin("advantage_estimator", "dapo", "DAPO", "As GRPO: group mean and group std.", _ESTIMATOR),
    builtin(
        "advantage_estimator",
        "rloo",
        "RLOO",
        "Leave-one-out baseline: the mean of the other samples of the group; no std scaling.",
        _ESTIMATOR,
    ),
    builtin(
        "advantage_estimator",
        "reinforce_pp",
        "REINFORCE++",
        "Group mean baseline whitened over the whole batch (REINFORCE++-baseline).",
        _ESTIMATOR,
    ),
    builtin(
        "loss",
        "ppo_clip",
        "Clipped surrogate",
        "PPO-clip surrogate with the range [1 - clip_low, 1 + clip_high], plus kl_coef times the k3 KL "
        "to the reference, aggregated as loss_agg says; truncated importance weights for stale batches.",
        "trainers.learn.losses:PpoClipLoss",
    ),
    builtin(
        "rollout_strategy",
        "independent",
        "Independent samples",
        "Each sample of a group is its own episode from the task's start (multi-turn, with tools).",
        "trainers.rollout.episodes:IndependentRollouts",
    ),
    builtin(
        "rollout_strategy",
        "branching",
        "Branching rollouts (ARPO/AEPO)",
        "Each group grows as a tree within its group-size budget: a few global samples, and partial "
        "rollouts branched from the prefix where the model's entropy rises after a tool result (the "
        "branch_* knobs); held-out evaluation samples independently.",
        "trainers.rollout.branched:BranchingRollouts",
    ),
    builtin(
        "task_source",
        "tasks",
        "The environment's tasks",
        "The environment's task stream, in order.",
        "trainers.learn.curriculum:EnvironmentTasks",
    ),
    builtin(
        "task_source",
        "from_failures",
        "Curriculum from failures",
        "WebRL's curriculum: failed tasks seed new ones from the environment's generator, kept while the "
        "policy's success rate on them is in the band, with a replay buffer of past successes mixed in "
        "(the curriculum_* knobs).",
        "trainers.learn.curriculum:CurriculumFromFailures",
    ),
)


def _entry_point_parts(entry_point: EntryPoint) -> list[Part]:
    """The parts one entry point loads, stamped with its distribution and version."""
    loaded = entry_point.load()
    found = list(loaded) if isinstance(loaded, list | tuple) else [loaded]
    dist = entry_point.dist
    source = dist.metadata["Name"] if dist is not None else entry_point.value.partition(":")[0]
    stamp = dist.version if dist is not None else ""
    parts = []
    for part in found:
        if not isinstance(part, Part):
            raise TypeError(f"loaded {type(part).__name__}, not a trainers.parts.Part")
        if part.kind not in PART_KNOBS:
            raise ValueError(f"part {part.name!r} has kind {part.kind!r}; kinds: {', '.join(PART_KINDS)}")
        parts.append(dataclasses.replace(part, source=source, version=part.version or stamp))
    return parts


def collect_parts(builtins: Iterable[Part], plugins: Iterable[EntryPoint]) -> dict[str, dict[str, Part]]:
    """{kind: {name: Part}}: the built-ins, then each plugin's parts. A plugin that does not load, or whose
    part reuses a name already registered, is skipped with a warning saying why."""
    registry: dict[str, dict[str, Part]] = {kind: {} for kind in PART_KINDS}
    for part in builtins:
        registry[part.kind][part.name] = part
    for entry_point in plugins:
        try:
            parts = _entry_point_parts(entry_point)
        except Exception as exc:  # noqa: BLE001 — a broken plugin must not stop the trainer or a worker
            message = (
                f"the part plugin {entry_point.name!r} ({entry_point.value}) of the "
                f"{PARTS_ENTRY_POINTS} group did not load and is left out: {type(exc).__name__}: {exc}"
            )
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            log.warning(message)
            continue
        for part in parts:
            taken = registry[part.kind].get(part.name)
            if taken is not None:
                message = (
                    f"the part plugin {entry_point.name!r} registers the {part.kind} {part.name!r}, which "
                    f"{taken.source} already has: left out"
                )
                warnings.warn(message, RuntimeWarning, stacklevel=2)
                log.warning(message)
                continue
            registry[part.kind][part.name] = part
    return registry


@cache
def registered_parts() -> dict[str, dict[str, Part]]:
    """Every part this process has, by kind then name (the entry point group is read once)."""
    return collect_parts(BUILTIN_PARTS, entry_points(group=PARTS_ENTRY_POINTS))


def part_catalogue() -> list[dict[str, Any]]:
    """Every part of this process as JSON (`Part.describe`), by kind then name: a worker's heartbeat."""
    return [part.describe() for kind in PART_KINDS for part in registered_parts()[kind].values()]


def get_part(kind: str, name: str) -> Part:
    known = registered_parts()[kind]
    if name not in known:
        raise KeyError(unknown_part_message(kind, name, list(known)))
    return known[name]


def unknown_part_message(kind: str, name: str, known: Iterable[str], where: str = "this machine") -> str:
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return (
        f"{KIND_TITLES[kind]} {name!r} is not installed on {where}.{hint} "
        f"Installed: {', '.join(names) or 'none'}."
    )


def chosen_parts(config: Mapping[str, Any] | Any) -> dict[str, str]:
    """{kind: part name} a run config (resolved dict or RunConfig) chooses."""
    read = config.get if isinstance(config, Mapping) else lambda key, default=None: getattr(config, key)
    return {kind: str(read(knob, "")) for kind, knob in PART_KNOBS.items()}


def build_part(kind: str, config: Any) -> Any:
    """The part of `kind` the typed run config chooses, built with its options (see the module docstring)."""
    options = (config.part_options or {}).get(kind) or {}
    return get_part(kind, getattr(config, PART_KNOBS[kind])).build(config, options)


def part_errors(
    config: Mapping[str, Any], catalogue: Iterable[Mapping[str, Any]] | None = None, where: str = ""
) -> dict[str, list[str]]:
    """{knob path: [messages]}: each chosen part that `catalogue` (parts as `Part.describe` gives them;
    None: this process's) lacks, and options a chosen part's schema refuses ({} when all is well).
    `where` names who has the catalogue in the messages ("the workers of the cpu queue")."""
    if catalogue is None:
        catalogue = part_catalogue()
    by_kind: dict[str, dict[str, Mapping[str, Any]]] = {kind: {} for kind in PART_KINDS}
    for entry in catalogue:
        if entry.get("kind") in by_kind:
            by_kind[str(entry["kind"])][str(entry.get("name"))] = entry
    errors: dict[str, list[str]] = {}
    options = config.get("part_options") or {}
    if not isinstance(options, Mapping):
        return errors  # the run schema reports the type
    for kind, name in chosen_parts(config).items():
        found = by_kind[kind].get(name)
        if found is None:
            message = unknown_part_message(kind, name, by_kind[kind], where or "this machine")
            errors[PART_KNOBS[kind]] = [message]
            continue
        given = options.get(kind, {})
        schema = dict(found.get("options_schema") or NO_OPTIONS)
        for path, messages in validate_config(schema, given).items():
            errors[f"part_options.{kind}" + (f".{path}" if path else "")] = messages
    for kind in options:
        if kind not in PART_KNOBS:
            errors["part_options"] = [f"Unknown kind of part {kind!r}; kinds: {', '.join(PART_KINDS)}."]
    return errors
