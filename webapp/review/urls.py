from django.urls import path

from webapp.review import views

app_name = "review"
urlpatterns = [
    # collaboration on a trajectory
    path(
        "review/trajectories/<int:trajectory_id>/panel/",
        views.collaboration_panel,
        name="collaboration_panel",
    ),
    path("review/trajectories/<int:trajectory_id>/comments/", views.comment_create, name="comment_create"),
    path("review/comments/<int:comment_id>/edit/", views.comment_edit, name="comment_edit"),
    path("review/comments/<int:comment_id>/delete/", views.comment_delete, name="comment_delete"),
    path("review/trajectories/<int:trajectory_id>/tags/", views.tag_add, name="tag_add"),
    path(
        "review/trajectories/<int:trajectory_id>/tags/<int:tag_id>/remove/",
        views.tag_remove,
        name="tag_remove",
    ),
    path("review/trajectories/<int:trajectory_id>/flags/", views.flag_raise, name="flag_raise"),
    path("review/flags/<int:flag_id>/resolve/", views.flag_resolve, name="flag_resolve"),
    path("review/trajectories/<int:trajectory_id>/turns/judge/", views.turn_judge, name="turn_judge"),
    path("activity/", views.activity, name="activity"),
    # preference annotation
    path("review/queues/", views.queue_list, name="queue_list"),
    path("review/queues/new/", views.queue_create, name="queue_create"),
    path("review/queues/<int:queue_id>/", views.queue_detail, name="queue_detail"),
    path("review/queues/<int:queue_id>/annotators/", views.queue_annotators, name="queue_annotators"),
    path("review/queues/<int:queue_id>/judges/", views.queue_judges, name="queue_judges"),
    path("review/queues/<int:queue_id>/judges/new/", views.queue_judge_start, name="queue_judge_start"),
    path(
        "review/queues/<int:queue_id>/judges/<int:judge_id>/cancel/",
        views.queue_judge_cancel,
        name="queue_judge_cancel",
    ),
    path(
        "review/queues/<int:queue_id>/judges/<int:judge_id>/snapshots/",
        views.queue_judge_snapshots,
        name="queue_judge_snapshots",
    ),
    path("review/queues/<int:queue_id>/annotate/", views.annotate, name="annotate"),
    path("review/queues/<int:queue_id>/pairs/<int:pair_id>/", views.pair, name="pair"),
    path("review/queues/<int:queue_id>/pairs/<int:pair_id>/judge/", views.judge, name="judge"),
    path("review/queues/<int:queue_id>/snapshots/", views.snapshot_create, name="snapshot_create"),
    path("review/snapshots/<int:snapshot_id>/dpo.jsonl", views.snapshot_dpo, name="snapshot_dpo"),
    path("review/snapshots/<int:snapshot_id>/dpo-run/", views.snapshot_dpo_run, name="snapshot_dpo_run"),
    path(
        "review/snapshots/<int:snapshot_id>/dpo-text.jsonl", views.snapshot_dpo_text, name="snapshot_dpo_text"
    ),
    path("review/snapshots/<int:snapshot_id>/pairs.parquet", views.snapshot_parquet, name="snapshot_parquet"),
]
