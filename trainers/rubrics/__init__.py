"""Rubrics: named, weighted criteria that score a trajectory.

Everything importable from here is plain Python (no torch), so the web process can validate rubric
specs and score a pasted transcript in its preview. Criteria that need a model (LLM judge, learned
reward) get it injected at build time and import torch only when they load one.
"""

from __future__ import annotations

from trainers.rubrics.base import Criterion, CriterionResult, CriterionUnavailable
from trainers.rubrics.kinds import BUILTIN_CRITERIA
from trainers.rubrics.scoring import (
    AGGREGATIONS,
    ComponentScore,
    InvalidRubric,
    Rubric,
    RubricScore,
    build_rubric,
    rubric_hash,
    rubric_schema,
    score_group,
    score_trajectory,
    validate_rubric,
)
from trainers.rubrics.transcript import TranscriptError, parse_transcript

__all__ = [
    "AGGREGATIONS",
    "BUILTIN_CRITERIA",
    "ComponentScore",
    "Criterion",
    "CriterionResult",
    "CriterionUnavailable",
    "InvalidRubric",
    "Rubric",
    "RubricScore",
    "TranscriptError",
    "build_rubric",
    "parse_transcript",
    "rubric_hash",
    "rubric_schema",
    "score_group",
    "score_trajectory",
    "validate_rubric",
]
