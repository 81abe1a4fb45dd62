"""The trajectory explorer and each user's saved views of it: the pages are review's
(webapp.review.views_explorer: the explorer reads trajectories with what reviewers did), the addresses
rollouts' (`rollouts:explorer`)."""

from django.urls import path

from webapp.review import views_explorer as views

urlpatterns = [
    path("trajectories/", views.explorer_view, name="explorer"),
    path("trajectories/views/", views.saved_view_save, name="saved_view_save"),
    path("trajectories/views/<int:view_id>/delete/", views.saved_view_delete, name="saved_view_delete"),
]
