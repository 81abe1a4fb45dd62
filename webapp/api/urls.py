"""/api/…: the JSON API (see docs/api.md), its OpenAPI document and the Swagger / Redoc pages."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from webapp.api import views
from webapp.rollouts.views_explorer import ProjectTrajectoryExplorerView

app_name = "api"

urlpatterns = [
    # OpenAPI: the document and two readers of it. Public: the schema describes shapes, not data.
    path("schema/", SpectacularAPIView.as_view(permission_classes=[], authentication_classes=[]), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema", permission_classes=[]), name="docs"),
    path("docs/redoc/", SpectacularRedocView.as_view(url_name="api:schema", permission_classes=[]), name="redoc"),
    # Projects and members.
    path("projects/", views.ProjectListView.as_view(), name="projects"),
    path("projects/<slug:slug>/", views.ProjectDetailView.as_view(), name="project"),
    path("projects/<slug:slug>/members/", views.MemberListView.as_view(), name="members"),
    path("projects/<slug:slug>/members/<int:pk>/", views.MemberDetailView.as_view(), name="member"),
    # Environments and rubrics (versioned).
    path("projects/<slug:slug>/environments/", views.EnvironmentListView.as_view(), name="environments"),
    path("projects/<slug:slug>/environments/<int:pk>/", views.EnvironmentDetailView.as_view(), name="environment"),
    path(
        "projects/<slug:slug>/environments/<int:pk>/versions/",
        views.EnvironmentVersionListView.as_view(),
        name="environment-versions",
    ),
    path("projects/<slug:slug>/rubrics/", views.RubricListView.as_view(), name="rubrics"),
    path("projects/<slug:slug>/rubrics/<int:pk>/", views.RubricDetailView.as_view(), name="rubric"),
    path("projects/<slug:slug>/rubrics/<int:pk>/versions/", views.RubricVersionListView.as_view(), name="rubric-versions"),
    # Runs and what they produce.
    path("projects/<slug:slug>/runs/", views.ProjectRunListView.as_view(), name="runs"),
    path("projects/<slug:slug>/trajectories/", ProjectTrajectoryExplorerView.as_view(), name="trajectories"),
    path("runs/<int:pk>/", views.RunDetailView.as_view(), name="run"),
    path("runs/<int:pk>/cancel/", views.RunCancelView.as_view(), name="run-cancel"),
    path("runs/<int:pk>/resume/", views.RunResumeView.as_view(), name="run-resume"),
    path("runs/<int:pk>/fork/", views.RunForkView.as_view(), name="run-fork"),
    path("runs/<int:pk>/checkpoints/", views.RunCheckpointListView.as_view(), name="run-checkpoints"),
    path("runs/<int:pk>/trajectories/", views.RunTrajectoryListView.as_view(), name="run-trajectories"),
    path(
        "runs/<int:pk>/trajectories/<int:trajectory_id>/",
        views.RunTrajectoryDetailView.as_view(),
        name="run-trajectory",
    ),
    path("runs/<int:pk>/metrics/", views.RunMetricsView.as_view(), name="run-metrics"),
    # Review: comments and tags on trajectories, preference queues and their datasets.
    path("trajectories/<int:pk>/comments/", views.TrajectoryCommentListView.as_view(), name="trajectory-comments"),
    path("trajectories/<int:pk>/tags/", views.TrajectoryTagListView.as_view(), name="trajectory-tags"),
    path("trajectories/<int:pk>/tags/<path:name>/", views.TrajectoryTagDetailView.as_view(), name="trajectory-tag"),
    path("projects/<slug:slug>/preference-queues/", views.PreferenceQueueListView.as_view(), name="preference-queues"),
    path("preference-queues/<int:pk>/", views.PreferenceQueueDetailView.as_view(), name="preference-queue"),
    path(
        "preference-queues/<int:pk>/snapshots/",
        views.PreferenceSnapshotListView.as_view(),
        name="preference-queue-snapshots",
    ),
    path(
        "preference-snapshots/<int:pk>/export/",
        views.PreferenceSnapshotExportView.as_view(),
        name="preference-snapshot-export",
    ),
    # Registries, for clients that build forms.
    path("kinds/environments/", views.EnvironmentKindListView.as_view(), name="environment-kinds"),
    path("kinds/criteria/", views.CriterionKindListView.as_view(), name="criterion-kinds"),
    path("presets/", views.PresetListView.as_view(), name="presets"),
    # Personal API tokens.
    path("tokens/", views.TokenListView.as_view(), name="tokens"),
    path("tokens/<int:pk>/", views.TokenDetailView.as_view(), name="token"),
]
