"""Trajectory pages: the explorer (urls_explorer) and the group / trajectory / diff views
(urls_trajectories), each its own module."""

from django.urls import include, path

app_name = "rollouts"
urlpatterns = [
    path("", include("webapp.rollouts.urls_explorer")),
    path("", include("webapp.rollouts.urls_trajectories")),
]
