from django.urls import include, path

from webapp.review.views import (
    activity,
    annotation,
    collaboration,
    disagreements,
    judges,
    queues,
    snapshots,
    turns,
)

app_name = "review"
urlpatterns = [
    # collaboration on a trajectory
    path(
        "review/trajectories/<int:trajectory_id>/panel/",
        collaboration.collaboration_panel,
        name="collaboration_panel",
    ),
    path(
        "review/trajectories/<int:trajectory_id>/comments/",
        collaboration.comment_create,
        name="comment_create",
    ),
    path("review/comments/<int:comment_id>/edit/", collaboration.comment_edit, name="comment_edit"),
    path("review/comments/<int:comment_id>/resolve/", collaboration.thread_resolve, name="thread_resolve"),
    path(
        "review/trajectories/<int:trajectory_id>/turns/<int:turn_index>/discussion/",
        collaboration.turn_discussion,
        name="turn_discussion",
    ),
    path("review/comments/<int:comment_id>/delete/", collaboration.comment_delete, name="comment_delete"),
    path("review/trajectories/<int:trajectory_id>/tags/", collaboration.tag_add, name="tag_add"),
    path(
        "review/trajectories/<int:trajectory_id>/tags/<int:tag_id>/remove/",
        collaboration.tag_remove,
        name="tag_remove",
    ),
    path("review/trajectories/<int:trajectory_id>/flags/", collaboration.flag_raise, name="flag_raise"),
    path("review/flags/<int:flag_id>/resolve/", collaboration.flag_resolve, name="flag_resolve"),
    path("review/trajectories/<int:trajectory_id>/turns/judge/", turns.turn_judge, name="turn_judge"),
    path("activity/", activity.activity, name="activity"),
    # preference annotation
    path("review/queues/", queues.queue_list, name="queue_list"),
    path("review/queues/new/", queues.queue_create, name="queue_create"),
    path("review/queues/<int:queue_id>/", queues.queue_detail, name="queue_detail"),
    path("review/queues/<int:queue_id>/annotators/", queues.queue_annotators, name="queue_annotators"),
    path("review/queues/<int:queue_id>/judges/", judges.queue_judges, name="queue_judges"),
    path("review/queues/<int:queue_id>/judges/new/", judges.queue_judge_start, name="queue_judge_start"),
    path(
        "review/queues/<int:queue_id>/judges/<int:judge_id>/cancel/",
        judges.queue_judge_cancel,
        name="queue_judge_cancel",
    ),
    path(
        "review/queues/<int:queue_id>/judges/<int:judge_id>/snapshots/",
        judges.queue_judge_snapshots,
        name="queue_judge_snapshots",
    ),
    path("review/queues/<int:queue_id>/annotate/", annotation.annotate, name="annotate"),
    path("review/queues/<int:queue_id>/pairs/<int:pair_id>/", annotation.pair, name="pair"),
    path("review/queues/<int:queue_id>/pairs/<int:pair_id>/judge/", annotation.judge, name="judge"),
    path(
        "review/queues/<int:queue_id>/disagreements/",
        disagreements.disagreements,
        name="disagreements",
    ),
    path(
        "review/queues/<int:queue_id>/pairs/<int:pair_id>/adjudicate/",
        disagreements.adjudicate,
        name="adjudicate",
    ),
    path("review/queues/<int:queue_id>/snapshots/", snapshots.snapshot_create, name="snapshot_create"),
    path("review/snapshots/<int:snapshot_id>/dpo.jsonl", snapshots.snapshot_dpo, name="snapshot_dpo"),
    path("review/snapshots/<int:snapshot_id>/dpo-run/", snapshots.snapshot_dpo_run, name="snapshot_dpo_run"),
    path(
        "review/snapshots/<int:snapshot_id>/dpo-text.jsonl",
        snapshots.snapshot_dpo_text,
        name="snapshot_dpo_text",
    ),
    path(
        "review/snapshots/<int:snapshot_id>/pairs.parquet",
        snapshots.snapshot_parquet,
        name="snapshot_parquet",
    ),
    # the trajectory explorer and saved views
    path("", include("webapp.review.urls_explorer")),
]
