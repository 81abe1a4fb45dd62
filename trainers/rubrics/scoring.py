"""Rubric specs: validation, building, and scoring with both aggregation modes.

A rubric spec is a plain dict (the dashboard stores it as JSON):

    {"aggregation": "weighted_sum" | "group_normalized_sum",
     "criteria": [{"name": str, "kind": str, "weight": float >= 0, "params": {...}}]}

weighted_sum:          total = Σ_c weight_c · raw_c
group_normalized_sum:  total = Σ_c weight_c · z_c, where z_c standardises criterion c's raw values
                       across the group (population std; zero variance gives z = 0)

Invariant: a RubricScore's `total` is exactly the sum of its components' `weighted` values.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from trainers.registry import UnknownKind, criterion_kind, criterion_kinds
from trainers.rubrics import alarms
from trainers.rubrics.base import Criterion, CriterionResult, CriterionUnavailable
from trainers.types import Trajectory

AGGREGATIONS = ("weighted_sum", "group_normalized_sum")
_SPEC_FIELDS = {"aggregation", "criteria"}
_CRITERION_FIELDS = {"name", "kind", "weight", "params"}
_ZERO_VARIANCE = 1e-12


@dataclass
class ComponentScore:
    name: str
    kind: str
    raw: float
    weight: float
    weighted: float  # weight × raw (weighted_sum) or weight × normalized (group_normalized_sum)
    explanation: str
    normalized: float | None = None  # the group z-score, under group_normalized_sum
    turn_rewards: dict[int, float] | None = None
    skipped: bool = False  # could not score here (a model criterion in the web preview): weighted is 0
    provenance: dict[str, Any] = field(default_factory=dict)
    # False: scored, but a check its "only when the checks pass" gate reads failed, so weighted is 0
    # (and the hacking flag ignores it: it paid nothing).
    counted: bool = True

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.counted:
            del data["counted"]  # the usual case travels and is stored without it
        if self.turn_rewards is not None:
            data["turn_rewards"] = {str(k): v for k, v in self.turn_rewards.items()}
        return data


@dataclass
class RubricScore:
    total: float
    components: list[ComponentScore]
    turn_rewards: dict[int, float]  # Σ_c weight_c · criterion c's per-turn reward (raw, not normalized)
    aggregation: str = "weighted_sum"
    rubric_hash: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "aggregation": self.aggregation,
            "rubric_hash": self.rubric_hash,
            "components": [c.to_dict() for c in self.components],
            "turn_rewards": {str(k): v for k, v in sorted(self.turn_rewards.items())},
        }


class InvalidRubric(ValueError):
    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{path or 'rubric'}: {', '.join(msgs)}" for path, msgs in errors.items()))


def rubric_hash(spec: dict[str, Any]) -> str:
    """A short stable fingerprint of the spec, recorded with every score for provenance."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def rubric_schema() -> dict[str, Any]:
    """JSON schema of a rubric spec (params are checked per kind by validate_rubric)."""
    return {
        "type": "object",
        "title": "Rubric",
        "properties": {
            "aggregation": {
                "type": "string",
                "title": "Aggregation",
                "description": "weighted_sum: Σ weight × raw. group_normalized_sum: Σ weight × z, each "
                "criterion standardised across the group of rollouts of one task.",
                "enum": list(AGGREGATIONS),
                "default": "weighted_sum",
            },
            "criteria": {
                "type": "array",
                "title": "Criteria",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "title": "Name", "minLength": 1, "maxLength": 100},
                        "kind": {"type": "string", "title": "Kind", "enum": sorted(criterion_kinds())},
                        "weight": {"type": "number", "title": "Weight", "minimum": 0, "default": 1.0},
                        "params": {"type": "object", "title": "Parameters", "default": {}},
                    },
                    "required": ["name", "kind"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["criteria"],
        "additionalProperties": False,
    }


def validate_rubric(spec: Any) -> dict[str, list[str]]:
    """Field-path errors of a rubric spec ({} when valid), e.g. {"criteria.1.weight": ["Weight must be 0 or more (got -1)."]}; `describe_path` names the row."""
    errors: dict[str, list[str]] = {}

    def add(path: str, message: str) -> None:
        errors.setdefault(path, []).append(message)

    if not isinstance(spec, dict):
        return {"": ["must be an object with 'aggregation' and 'criteria'"]}
    unknown = sorted(set(spec) - _SPEC_FIELDS)
    if unknown:
        add("", f"Unknown field(s): {', '.join(unknown)}")
    aggregation = spec.get("aggregation", "weighted_sum")
    if aggregation not in AGGREGATIONS:
        add("aggregation", f"Aggregation must be one of: {', '.join(AGGREGATIONS)}.")
    criteria = spec.get("criteria")
    if not isinstance(criteria, list) or not criteria:
        add("criteria", "A rubric needs at least one criterion.")
        return errors
    seen: dict[str, int] = {}
    for i, item in enumerate(criteria):
        where = f"criteria.{i}"
        if not isinstance(item, dict):
            add(where, f"Criterion {i + 1} must be an object with name, kind, weight and params.")
            continue
        extra = sorted(set(item) - _CRITERION_FIELDS)
        if extra:
            add(where, f"Unknown field(s): {', '.join(extra)}")
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            add(f"{where}.name", "Name is required.")
        elif len(name) > 100:
            add(f"{where}.name", "Name must be at most 100 characters long.")
        elif name in seen:
            add(f"{where}.name", f"Name {name!r} is already used by criterion {seen[name] + 1}.")
        else:
            seen[name] = i
        weight = item.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            add(f"{where}.weight", "Weight must be a number.")
        elif weight < 0:
            add(f"{where}.weight", f"Weight must be 0 or more (got {weight}).")
        params = item.get("params", {})
        if not isinstance(params, dict):
            add(f"{where}.params", "Parameters must be an object (a mapping of names to values).")
            params = None
        kind = item.get("kind")
        if not isinstance(kind, str) or not kind:
            add(f"{where}.kind", "Kind is required.")
            continue
        try:
            kind_spec = criterion_kind(kind)
        except UnknownKind:
            add(f"{where}.kind", f"Kind {kind!r} is not a known criterion kind.")
            continue
        if params is None:
            continue
        param_errors = kind_spec.validate(params)
        for path, messages in param_errors.items():
            for message in messages:
                add(f"{where}.params.{path}" if path else f"{where}.params", message)
    return errors


def describe_path(path: str) -> str:
    """Where a rubric error is, in words: "criteria.1.params.pattern" -> "Criterion 2 · params.pattern",
    "criteria.0" -> "Criterion 1", "aggregation" -> "aggregation". Criteria are numbered from 1, as the
    rubric builder numbers its rows."""
    parts = path.split(".")
    if len(parts) >= 2 and parts[0] == "criteria" and parts[1].isdigit():
        rest = ".".join(parts[2:])
        return f"Criterion {int(parts[1]) + 1}" + (f" · {rest}" if rest else "")
    return path


GenerateFn = Callable[[list[str]], list[str]]
ScoreFn = Callable[[list[str]], list[float]]


@dataclass
class _BuiltCriterion:
    name: str
    kind: str
    weight: float
    criterion: Criterion


class Rubric:
    """A validated, built rubric. Build once per run; score trajectories or groups many times."""

    def __init__(
        self,
        spec: dict[str, Any],
        *,
        generate: GenerateFn | Mapping[str, GenerateFn] | None = None,
        reward_scorer: ScoreFn | None = None,
    ) -> None:
        errors = validate_rubric(spec)
        if errors:
            raise InvalidRubric(errors)
        self.spec = spec
        self.aggregation: str = spec.get("aggregation", "weighted_sum")
        self.hash = rubric_hash(spec)
        self.criteria: list[_BuiltCriterion] = []
        for item in spec["criteria"]:
            criterion = criterion_kind(item["kind"]).build(item.get("params", {}))
            attach = getattr(criterion, "attach_models", None)
            if attach is not None:
                attach(generate=generate, reward_scorer=reward_scorer)
            self.criteria.append(
                _BuiltCriterion(item["name"], item["kind"], float(item.get("weight", 1.0)), criterion)
            )
        # Read once here, not per trajectory: which criteria are checks, which are gated on them.
        self._is_check = [alarms.signal_of(built.kind) == alarms.VERIFIABLE for built in self.criteria]
        self._gated = [
            bool(getattr(built.criterion, "only_when_checks_pass", False)) for built in self.criteria
        ]

    def score(self, trajectory: Trajectory, *, skip_unavailable: bool = False) -> RubricScore:
        return self.score_group([trajectory], skip_unavailable=skip_unavailable)[0]

    def score_group(
        self, trajectories: list[Trajectory], *, skip_unavailable: bool = False
    ) -> list[RubricScore]:
        """Score rollouts of one task together (group normalisation needs the whole group).

        `skip_unavailable`: a criterion that cannot score in this process (no model attached, reward
        model or function not installed here) is reported as skipped with weight applied to 0,
        instead of raising. The web preview uses it; the trainer must not.
        """
        if not trajectories:
            return []
        per_criterion: list[list[CriterionResult] | None] = []
        skipped_reason: list[str] = []
        for built in self.criteria:
            try:
                results = built.criterion.score_many(trajectories)
                for result in results:
                    if not math.isfinite(result.raw):
                        raise ValueError(f"criterion {built.name!r} gave a non-finite value {result.raw!r}")
                per_criterion.append(results)
                skipped_reason.append("")
            except CriterionUnavailable as exc:
                if not skip_unavailable:
                    raise
                per_criterion.append(None)
                skipped_reason.append(str(exc))
        normalized: list[list[float] | None] = []
        for criterion_results in per_criterion:
            if criterion_results is None or self.aggregation != "group_normalized_sum":
                normalized.append(None)
                continue
            raws = [r.raw for r in criterion_results]
            mean = sum(raws) / len(raws)
            std = math.sqrt(sum((x - mean) ** 2 for x in raws) / len(raws))
            normalized.append([0.0 if std < _ZERO_VARIANCE else (x - mean) / std for x in raws])
        gated = self._gated
        scores = []
        for j in range(len(trajectories)):
            components = []
            turn_rewards: dict[int, float] = {}
            failed_checks = self._failed_checks(per_criterion, j, trajectories[j]) if any(gated) else []
            for c, built in enumerate(self.criteria):
                scored = per_criterion[c]
                if scored is None:
                    components.append(
                        ComponentScore(
                            built.name,
                            built.kind,
                            0.0,
                            built.weight,
                            0.0,
                            f"Not scored here: {skipped_reason[c]}",
                            skipped=True,
                        )
                    )
                    continue
                result = scored[j]
                z_scores = normalized[c]
                z = z_scores[j] if z_scores is not None else None
                weighted = built.weight * (z if z is not None else result.raw)
                explanation = result.explanation
                if gated[c] and failed_checks:
                    # Scored (shown, with why it did not count), not counted.
                    weighted = 0.0
                    not_counted = f"not counted: {', '.join(failed_checks)} failed"
                    explanation = f"{explanation} — {not_counted}" if explanation else not_counted
                else:
                    for turn, value in (result.turn_rewards or {}).items():
                        turn_rewards[turn] = turn_rewards.get(turn, 0.0) + built.weight * value
                components.append(
                    ComponentScore(
                        built.name,
                        built.kind,
                        result.raw,
                        built.weight,
                        weighted,
                        explanation,
                        normalized=z,
                        turn_rewards=result.turn_rewards,
                        provenance=result.provenance,
                        counted=not (gated[c] and failed_checks),
                    )
                )
            total = sum(c.weighted for c in components)
            scores.append(RubricScore(total, components, turn_rewards, self.aggregation, self.hash))
        return scores

    def _failed_checks(
        self, per_criterion: list[list[CriterionResult] | None], j: int, trajectory: Trajectory
    ) -> list[str]:
        """The verifiable criteria trajectory `j` failed (and "truncated" / "error" for an episode cut
        off): what the "only when the checks pass" gate of a learned criterion reads."""
        failed = [
            built.name
            for built, is_check, scored in zip(self.criteria, self._is_check, per_criterion, strict=True)
            if is_check and scored is not None and not alarms.passes(built.kind, scored[j].raw)
        ]
        if trajectory.status in alarms.FAILED_STATUSES:
            failed.append(trajectory.status)
        return failed


def build_rubric(
    spec: dict[str, Any],
    *,
    generate: GenerateFn | Mapping[str, GenerateFn] | None = None,
    reward_scorer: ScoreFn | None = None,
) -> Rubric:
    """Validate and build a rubric, injecting a judge `generate` callable (or {model name: callable})."""
    return Rubric(spec, generate=generate, reward_scorer=reward_scorer)


def score_trajectory(
    spec: dict[str, Any], trajectory: Trajectory, *, skip_unavailable: bool = False, **models: Any
) -> RubricScore:
    return build_rubric(spec, **models).score(trajectory, skip_unavailable=skip_unavailable)


def score_group(
    spec: dict[str, Any], trajectories: list[Trajectory], *, skip_unavailable: bool = False, **models: Any
) -> list[RubricScore]:
    return build_rubric(spec, **models).score_group(trajectories, skip_unavailable=skip_unavailable)
