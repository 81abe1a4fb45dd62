from django.contrib import admin
from django.urls import include, path, re_path

from webapp.api.views import NOT_FOUND_NAME, api_not_found
from webapp.core.views import favicon, healthz
from webapp.rollouts.apis import ExternalRunListView, RunEventsView

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("favicon.ico", favicon, name="favicon"),
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
    # The Tinker SDK's routes (/api/v1/…; our own JSON API has no v1/ prefix, so the two never meet).
    path("api/v1/", include("webapp.tinker.urls")),
    path("api/", include("webapp.api.urls")),
    path("", include("webapp.fleet.urls")),
    path("admin/", admin.site.urls),
    # Last: any other path under /api/ is a JSON 404 (Django's would be an HTML page, or a slash redirect).
    re_path(r"^api/(?P<rest>.*)$", api_not_found, name=NOT_FOUND_NAME),
]

# Pages get the product's error pages; everything under /api/ gets a JSON error body.
handler400 = "webapp.core.views.bad_request"
handler403 = "webapp.core.views.permission_denied"
handler404 = "webapp.core.views.page_not_found"
handler500 = "webapp.core.views.server_error"
