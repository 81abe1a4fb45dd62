"""Trajectory pages: the explorer (urls_explorer) and the group / trajectory / diff views
(urls_trajectories), each its own module."""

from django.urls import include, path

from webapp.rollouts import views_import

app_name = "rollouts"
urlpatterns = [
    path("", include("webapp.rollouts.urls_explorer")),
    path("", include("webapp.rollouts.urls_trajectories")),
    path("runs/import/atif/", views_import.atif_import, name="atif_import"),
]
