"""Writes for settling disagreements: an owner's or researcher's decision on a pair its voters split on,
which dataset snapshots then export instead of the votes (webapp.review.tally.decide)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from webapp.review.models import ActivityVerb, Adjudication, Choice, PreferencePair
from webapp.review.selectors import queue_votes
from webapp.review.services.activity import log_activity
from webapp.review.services.collaboration import MAX_COMMENT
from webapp.review.tally import is_split


def pair_adjudicate(*, pair: PreferencePair, user, choice: str, rationale: str = "") -> Adjudication:
    """Settle `pair` (canonical choice a / b / tie / both_bad), or change how it was settled. Only a pair
    whose votes are split can be settled: overruling a unanimous vote is not adjudication. The votes as
    they stand now are kept on the decision (`overridden`), so a snapshot's provenance says what it
    overrode even if an annotator changes their vote later. The caller has checked Capability.ADJUDICATE."""
    if choice not in Choice.values:
        raise ValidationError({"choice": ["Choose A, B, tie or both bad."]})
    rationale = (rationale or "").strip()
    if len(rationale) > MAX_COMMENT:
        raise ValidationError({"rationale": [f"At most {MAX_COMMENT} characters."]})
    queue = pair.queue
    with transaction.atomic():
        # one decision per pair, even when two people settle it at once: the later one wins, both logged
        PreferencePair.objects.select_for_update().filter(pk=pair.pk).first()
        votes = queue_votes(queue, pair=pair).votes.get(pair.pk, [])
        if not is_split([vote.choice for vote in votes]):
            raise ValidationError("Its voters agree on this pair: there is no disagreement to settle.")
        adjudication, _ = Adjudication.objects.update_or_create(
            pair=pair,
            defaults={
                "choice": choice,
                "rationale": rationale,
                "adjudicated_by": user,
                "adjudicated_at": timezone.now(),
                "overridden": [
                    {"annotator": vote.voter, "choice": vote.choice, "rationale": vote.rationale}
                    for vote in votes
                ],
            },
        )
        log_activity(queue.project, user, ActivityVerb.PAIR_ADJUDICATED, queue=queue, pair=pair.pk)
    return adjudication
