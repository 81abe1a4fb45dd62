"""Writes for per-turn preferences: mark the turn where a trajectory went wrong, prefer one turn over
another at the same point, withdraw one's judgements (docs/review.md, "Per-turn preferences").

Views and the API resolve both trajectories through `webapp.projects.access` (annotate on the judged
one, read on the other) before calling these; the rules about turns are checked here."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from webapp.review.models import ActivityVerb, TurnJudgement, TurnVerdict
from webapp.review.services.activity import log_activity
from webapp.rollouts.models import Trajectory, Turn


def _assistant_turn(trajectory: Trajectory, index: int | None, field: str) -> Turn:
    if index is None:
        raise ValidationError({field: ["Say which turn."]})
    turn = Turn.objects.filter(trajectory=trajectory, index=index).only("index", "role").first()
    if turn is None:
        raise ValidationError({field: [f"Trajectory {trajectory.pk} has no turn {index}."]})
    if turn.role != "assistant":
        raise ValidationError(
            {
                field: [
                    f"Turn {index} of trajectory {trajectory.pk} is a {turn.role} turn; judge the model's turns."
                ]
            }
        )
    return turn


@transaction.atomic
def turn_mark_wrong(*, trajectory: Trajectory, annotator, turn_index: int | None) -> TurnJudgement:
    """The annotator's "went wrong at this turn" on the trajectory; marking again moves their mark."""
    turn_index = _assistant_turn(trajectory, turn_index, "turn_index").index
    judgement, _created = TurnJudgement.objects.update_or_create(
        trajectory=trajectory,
        annotator=annotator,
        verdict=TurnVerdict.WRONG,
        defaults={"project_id": trajectory.run.project_id, "turn_index": turn_index},
    )
    log_activity(
        trajectory.run.project,
        annotator,
        ActivityVerb.TURN_JUDGED,
        trajectory=trajectory,
        turn_index=turn_index,
    )
    return judgement


def _same_point(trajectory: Trajectory, turn_index: int, other: Trajectory, other_turn_index: int) -> None:
    """Two turns are at the same point when they answer the same task after the same conversation."""
    if other.pk == trajectory.pk:
        raise ValidationError({"other": ["Compare with another trajectory."]})
    if other.run.project_id != trajectory.run.project_id:
        raise ValidationError({"other": [f"Trajectory {other.pk} is in another project."]})
    if other.task_id != trajectory.task_id:
        raise ValidationError(
            {"other": [f"Trajectory {other.pk} is another task; turns are compared on one task."]}
        )
    if other_turn_index != turn_index:
        raise ValidationError(
            {"other_turn_index": ["Compare turns at the same place in the conversation (the same index)."]}
        )
    before = [
        list(
            Turn.objects.filter(trajectory=t, index__lt=turn_index)
            .order_by("index")
            .values_list("role", "text")
        )
        for t in (trajectory, other)
    ]
    if before[0] != before[1]:
        first = next(
            (i for i, (a, b) in enumerate(zip(before[0], before[1], strict=False)) if a != b),
            min(len(before[0]), len(before[1])),
        )
        raise ValidationError(
            {
                "turn_index": [
                    f"The conversations differ before turn {turn_index} (at turn {first}); compare the first turn where they diverge."
                ]
            }
        )


@transaction.atomic
def turn_prefer(
    *,
    trajectory: Trajectory,
    turn_index: int | None,
    other: Trajectory,
    other_turn_index: int | None,
    annotator,
) -> TurnJudgement:
    """The annotator prefers `trajectory`'s turn to `other`'s turn at the same point. Preferring the other
    way round afterwards replaces it (one preference per annotator and pair of turns)."""
    turn_index = _assistant_turn(trajectory, turn_index, "turn_index").index
    other_turn_index = _assistant_turn(other, other_turn_index, "other_turn_index").index
    _same_point(trajectory, turn_index, other, other_turn_index)
    TurnJudgement.objects.filter(
        verdict=TurnVerdict.BETTER,
        annotator=annotator,
        trajectory=other,
        turn_index=other_turn_index,
        other=trajectory,
        other_turn_index=turn_index,
    ).delete()
    judgement, _created = TurnJudgement.objects.get_or_create(
        verdict=TurnVerdict.BETTER,
        annotator=annotator,
        trajectory=trajectory,
        turn_index=turn_index,
        other=other,
        other_turn_index=other_turn_index,
        defaults={"project_id": trajectory.run.project_id},
    )
    log_activity(
        trajectory.run.project,
        annotator,
        ActivityVerb.TURN_JUDGED,
        trajectory=trajectory,
        turn_index=turn_index,
    )
    return judgement


@transaction.atomic
def turn_judgements_withdraw(*, trajectory: Trajectory, annotator) -> int:
    """Remove the annotator's turn judgements that involve the trajectory (either side); how many."""
    mine = TurnJudgement.objects.filter(annotator=annotator)
    deleted, _ = (mine.filter(trajectory=trajectory) | mine.filter(other=trajectory)).delete()
    if deleted:
        log_activity(
            trajectory.run.project, annotator, ActivityVerb.TURN_JUDGEMENT_CLEARED, trajectory=trajectory
        )
    return deleted
