"""Rubrics: named, weighted criteria that score a trajectory.

Everything importable from here is plain Python (no torch), so the web process can validate rubric
specs and score a pasted transcript in its preview. Criteria that need a model (LLM judge, learned
reward) get it injected at build time and import torch only when they load one.

The names below load their module on first use (PEP 562): `trainers.registry` reads the criterion
catalogue (`trainers.rubrics.kinds`, data only) without pulling in the scoring code, which itself
looks kinds up in the registry.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Criterion": "base",
    "CriterionResult": "base",
    "CriterionUnavailable": "base",
    "BUILTIN_CRITERIA": "kinds",
    "AGGREGATIONS": "scoring",
    "ComponentScore": "scoring",
    "InvalidRubric": "scoring",
    "Rubric": "scoring",
    "RubricScore": "scoring",
    "build_rubric": "scoring",
    "rubric_hash": "scoring",
    "rubric_schema": "scoring",
    "score_group": "scoring",
    "score_trajectory": "scoring",
    "validate_rubric": "scoring",
    "describe_path": "scoring",
    "TranscriptError": "transcript",
    "parse_transcript": "transcript",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trainers.rubrics' has no attribute {name!r}")
    return getattr(importlib.import_module(f"trainers.rubrics.{module}"), name)


__all__ = sorted(_EXPORTS)
