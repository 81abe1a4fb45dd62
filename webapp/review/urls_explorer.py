"""The trajectory explorer and each user's saved views of it (`review:explorer`; the pages are
`webapp.review.views.explorer`). Included by review's URLconf."""

from django.urls import path

from webapp.review.views import explorer as views

urlpatterns = [
    path("trajectories/", views.explorer_view, name="explorer"),
    path("trajectories/views/", views.saved_view_save, name="saved_view_save"),
    path("trajectories/views/<int:view_id>/delete/", views.saved_view_delete, name="saved_view_delete"),
]
