"""Writes for review, by domain: comments, tags, flags, mentions, the activity log, preference queues, judgements,
turn judgements, LLM judges annotating a queue, settling disagreements and dataset snapshots. Views call these after
`webapp.projects.access` has checked the caller's role; the
rules that depend on who owns what (only the author edits a comment, only assigned annotators judge)
are checked here. Every write is atomic and records who did it in the project's Activity log.
"""

from webapp.review.models import side_of_choice  # the rule lives on the model; views read it here
from webapp.review.services.activity import activity_visit, log_activity
from webapp.review.services.adjudication import pair_adjudicate
from webapp.review.services.collaboration import (
    MAX_COMMENT,
    MAX_TAG,
    MENTION,
    comment_create,
    comment_delete,
    comment_edit,
    comment_thread_resolve,
    flag_raise,
    flag_resolve,
    mentioned_usernames,
    notifications_mark_read,
    tag_add,
    tag_remove,
)
from webapp.review.services.judges import (
    queue_judge_cancel,
    queue_judge_claim,
    queue_judge_fail,
    queue_judge_finish,
    queue_judge_record,
    queue_judge_set_in_snapshots,
    queue_judge_start,
    queue_judges_dispatch_pending,
    queue_judges_reap_lost,
)
from webapp.review.services.queues import (
    DEFAULT_LOCK_SECONDS,
    MAX_OVERLAP,
    MAX_QUEUE_PAIRS,
    VALID_PAIRINGS,
    Assignment,
    assignment_for,
    choice_from_side,
    judgement_submit,
    left_is_a_for,
    next_pair,
    queue_assign,
    queue_create,
)
from webapp.review.services.snapshots import (
    MAJORITY_RULE,
    RULE,
    majority,
    snapshot_create,
    snapshot_pairs,
)
from webapp.review.services.turns import turn_judgements_withdraw, turn_mark_wrong, turn_prefer

__all__ = [
    "Assignment",
    "DEFAULT_LOCK_SECONDS",
    "MAJORITY_RULE",
    "RULE",
    "MAX_COMMENT",
    "MAX_OVERLAP",
    "MAX_QUEUE_PAIRS",
    "MAX_TAG",
    "MENTION",
    "VALID_PAIRINGS",
    "activity_visit",
    "assignment_for",
    "choice_from_side",
    "comment_create",
    "comment_delete",
    "comment_edit",
    "comment_thread_resolve",
    "flag_raise",
    "flag_resolve",
    "judgement_submit",
    "left_is_a_for",
    "log_activity",
    "majority",
    "mentioned_usernames",
    "next_pair",
    "notifications_mark_read",
    "pair_adjudicate",
    "queue_assign",
    "queue_judge_cancel",
    "queue_judge_claim",
    "queue_judge_fail",
    "queue_judge_finish",
    "queue_judge_record",
    "queue_judge_set_in_snapshots",
    "queue_judge_start",
    "queue_judges_dispatch_pending",
    "queue_judges_reap_lost",
    "queue_create",
    "side_of_choice",
    "snapshot_create",
    "snapshot_pairs",
    "tag_add",
    "tag_remove",
    "turn_judgements_withdraw",
    "turn_mark_wrong",
    "turn_prefer",
]
