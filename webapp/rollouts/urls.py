"""Trajectory pages: the group / trajectory / diff views (urls_trajectories) and the ATIF import. (The
explorer is review's: webapp/review/urls_explorer.py.)"""

from django.urls import include, path

from webapp.rollouts import views_import

app_name = "rollouts"
urlpatterns = [
    path("", include("webapp.rollouts.urls_trajectories")),
    path("runs/import/atif/", views_import.atif_import, name="atif_import"),
]
