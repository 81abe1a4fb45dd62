"""/api/…: the JSON API (see docs/api.md), its OpenAPI document and the Swagger / Redoc pages. Each app owns
its endpoints (`<app>/apis.py` + `<app>/serializers.py`); this module only routes to them."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from webapp.accounts import apis as account_apis
from webapp.experiments import apis as experiment_apis
from webapp.projects import apis as project_apis
from webapp.review import apis as review_apis
from webapp.review.views import explorer as review_explorer
from webapp.rewards import apis as reward_apis
from webapp.rollouts import apis as rollout_apis

app_name = "api"

urlpatterns = [
    # OpenAPI: the document and two readers of it. Public: the schema describes shapes, not data.
    path(
        "schema/", SpectacularAPIView.as_view(permission_classes=[], authentication_classes=[]), name="schema"
    ),
    # The split view serves Swagger UI's start-up script as a file: the pages' CSP allows no inline script.
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(url_name="api:schema", permission_classes=[]),
        name="docs",
    ),
    path(
        "docs/redoc/",
        SpectacularRedocView.as_view(url_name="api:schema", permission_classes=[]),
        name="redoc",
    ),
    # Projects and members.
    path("projects/", project_apis.ProjectListView.as_view(), name="projects"),
    path("projects/<slug:slug>/", project_apis.ProjectDetailView.as_view(), name="project"),
    path("projects/<slug:slug>/members/", project_apis.MemberListView.as_view(), name="members"),
    path("projects/<slug:slug>/members/<int:pk>/", project_apis.MemberDetailView.as_view(), name="member"),
    path("projects/<slug:slug>/invitations/", project_apis.InvitationListView.as_view(), name="invitations"),
    path("projects/<slug:slug>/secrets/", project_apis.SecretListView.as_view(), name="secrets"),
    path("projects/<slug:slug>/secrets/<str:name>/", project_apis.SecretDetailView.as_view(), name="secret"),
    path(
        "projects/<slug:slug>/invitations/<int:pk>/",
        project_apis.InvitationDetailView.as_view(),
        name="invitation",
    ),
    # Environments and rubrics (versioned).
    path(
        "projects/<slug:slug>/environments/",
        experiment_apis.EnvironmentListView.as_view(),
        name="environments",
    ),
    path(
        "projects/<slug:slug>/environments/preview/",
        experiment_apis.EnvironmentPreviewView.as_view(),
        name="environment-preview",
    ),
    path(
        "projects/<slug:slug>/environments/<int:pk>/",
        experiment_apis.EnvironmentDetailView.as_view(),
        name="environment",
    ),
    path(
        "projects/<slug:slug>/environments/<int:pk>/versions/",
        experiment_apis.EnvironmentVersionListView.as_view(),
        name="environment-versions",
    ),
    path("projects/<slug:slug>/rubrics/", experiment_apis.RubricListView.as_view(), name="rubrics"),
    path("projects/<slug:slug>/rubrics/<int:pk>/", experiment_apis.RubricDetailView.as_view(), name="rubric"),
    path(
        "projects/<slug:slug>/rubrics/<int:pk>/versions/",
        experiment_apis.RubricVersionListView.as_view(),
        name="rubric-versions",
    ),
    path(
        "projects/<slug:slug>/rubrics/<int:pk>/judge-check/",
        experiment_apis.RubricJudgeCheckView.as_view(),
        name="rubric-judge-check",
    ),
    # Runs and what they produce.
    path("projects/<slug:slug>/runs/", experiment_apis.ProjectRunListView.as_view(), name="runs"),
    path(
        "projects/<slug:slug>/trajectories/",
        review_explorer.ProjectTrajectoryExplorerView.as_view(),
        name="trajectories",
    ),
    path("runs/<int:pk>/", experiment_apis.RunDetailView.as_view(), name="run"),
    path("runs/<int:pk>/cancel/", experiment_apis.RunCancelView.as_view(), name="run-cancel"),
    path("runs/<int:pk>/resume/", experiment_apis.RunResumeView.as_view(), name="run-resume"),
    path("runs/<int:pk>/fork/", experiment_apis.RunForkView.as_view(), name="run-fork"),
    path(
        "runs/<int:pk>/checkpoints/", experiment_apis.RunCheckpointListView.as_view(), name="run-checkpoints"
    ),
    path(
        "runs/<int:pk>/checkpoints/<int:checkpoint_id>/weights/",
        experiment_apis.CheckpointWeightsView.as_view(),
        name="checkpoint-weights",
    ),
    path("runs/<int:pk>/event-log/", experiment_apis.RunEventLogView.as_view(), name="run-event-log"),
    path(
        "runs/<int:pk>/trajectories/", rollout_apis.RunTrajectoryListView.as_view(), name="run-trajectories"
    ),
    path(
        "runs/<int:pk>/trajectories/<int:trajectory_id>/",
        rollout_apis.RunTrajectoryDetailView.as_view(),
        name="run-trajectory",
    ),
    path(
        "runs/<int:pk>/trajectories/<int:trajectory_id>/atif/",
        rollout_apis.RunTrajectoryAtifView.as_view(),
        name="run-trajectory-atif",
    ),
    path("runs/<int:pk>/atif/", rollout_apis.RunAtifView.as_view(), name="run-atif"),
    path("runs/<int:pk>/groups/", rollout_apis.RunGroupListView.as_view(), name="run-groups"),
    path("runs/<int:pk>/metrics/", rollout_apis.RunMetricsView.as_view(), name="run-metrics"),
    # Review: comments and tags on trajectories, preference queues and their datasets.
    path(
        "trajectories/<int:pk>/comments/",
        review_apis.TrajectoryCommentListView.as_view(),
        name="trajectory-comments",
    ),
    path(
        "comments/<int:pk>/resolve/",
        review_apis.CommentThreadResolveView.as_view(),
        name="comment-thread-resolve",
    ),
    path("trajectories/<int:pk>/tags/", review_apis.TrajectoryTagListView.as_view(), name="trajectory-tags"),
    path(
        "trajectories/<int:pk>/turn-judgements/",
        review_apis.TrajectoryTurnJudgementsView.as_view(),
        name="trajectory-turn-judgements",
    ),
    path(
        "trajectories/<int:pk>/tags/<path:name>/",
        review_apis.TrajectoryTagDetailView.as_view(),
        name="trajectory-tag",
    ),
    path(
        "projects/<slug:slug>/preference-queues/",
        review_apis.PreferenceQueueListView.as_view(),
        name="preference-queues",
    ),
    path(
        "preference-queues/<int:pk>/",
        review_apis.PreferenceQueueDetailView.as_view(),
        name="preference-queue",
    ),
    path(
        "preference-queues/<int:pk>/snapshots/",
        review_apis.PreferenceSnapshotListView.as_view(),
        name="preference-queue-snapshots",
    ),
    path(
        "preference-queues/<int:pk>/disagreements/",
        review_apis.QueueDisagreementsView.as_view(),
        name="preference-queue-disagreements",
    ),
    path(
        "preference-queues/<int:pk>/pairs/<int:pair_id>/adjudication/",
        review_apis.PairAdjudicationView.as_view(),
        name="preference-pair-adjudication",
    ),
    path(
        "preference-queues/<int:pk>/judges/<int:judge_id>/cancel/",
        review_apis.QueueJudgeCancelView.as_view(),
        name="queue-judge-cancel",
    ),
    path(
        "preference-snapshots/<int:pk>/export/",
        review_apis.PreferenceSnapshotExportView.as_view(),
        name="preference-snapshot-export",
    ),
    path(
        "preference-snapshots/<int:pk>/dpo-runs/",
        experiment_apis.DpoRunCreateView.as_view(),
        name="preference-snapshot-dpo-runs",
    ),
    path(
        "preference-snapshots/<int:pk>/reward-models/",
        reward_apis.RewardModelTrainView.as_view(),
        name="preference-snapshot-reward-models",
    ),
    # Learned reward models.
    path("reward-models/<int:pk>/", reward_apis.RewardModelDetailView.as_view(), name="reward-model"),
    path(
        "reward-models/<int:pk>/cancel/",
        reward_apis.RewardModelCancelView.as_view(),
        name="reward-model-cancel",
    ),
    path(
        "reward-models/<int:pk>/register/",
        reward_apis.RewardModelRegisterView.as_view(),
        name="reward-model-register",
    ),
    # Registries, for clients that build forms.
    path("kinds/environments/", experiment_apis.EnvironmentKindListView.as_view(), name="environment-kinds"),
    path("kinds/criteria/", experiment_apis.CriterionKindListView.as_view(), name="criterion-kinds"),
    path("presets/", experiment_apis.PresetListView.as_view(), name="presets"),
    path("parts/", experiment_apis.PartListView.as_view(), name="parts"),
    # Personal API tokens.
    path("tokens/", account_apis.TokenListView.as_view(), name="tokens"),
    path("tokens/<int:pk>/", account_apis.TokenDetailView.as_view(), name="token"),
    path("auth/token/", account_apis.TokenSignInView.as_view(), name="token-sign-in"),
]
