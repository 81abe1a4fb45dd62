from django.contrib import admin
from django.urls import include, path

from webapp.core.views import healthz
from webapp.rollouts.api import RunEventsView
from webapp.rollouts.external_api import ExternalRunListView

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("", include("webapp.projects.urls")),
    path("accounts/", include("webapp.accounts.urls")),
    path("p/<slug:slug>/", include("webapp.experiments.urls")),
    path("p/<slug:slug>/", include("webapp.rollouts.urls")),
    path("p/<slug:slug>/", include("webapp.review.urls")),
    path("notifications/", include("webapp.review.urls_notifications")),
    path("p/<slug:slug>/", include("webapp.live.urls")),
    path("p/<slug:slug>/", include("webapp.rewards.urls")),
    path("api/runs/<int:run_id>/events", RunEventsView.as_view(), name="run_events"),
    path("api/projects/<slug:slug>/external-runs/", ExternalRunListView.as_view(), name="external_runs"),
    path("api/", include("webapp.api.urls")),
    path("", include("webapp.fleet.urls")),
    path("admin/", admin.site.urls),
]
