"""Mounted under p/<slug:slug>/ by webapp/urls.py."""

from django.urls import path

from webapp.live import views

app_name = "live"
urlpatterns = [
    path("runs/<int:run_id>/metrics.json", views.metrics_json, name="metrics_json"),
    path("runs/<int:run_id>/events.json", views.events_json, name="events_json"),
    path("runs/<int:run_id>/histograms.json", views.histograms_json, name="histograms_json"),
    path("runs/<int:run_id>/bin.json", views.bin_json, name="bin_json"),
    path("runs/<int:run_id>/health.json", views.health_json, name="health_json"),
    path("compare/", views.compare, name="compare"),
]
