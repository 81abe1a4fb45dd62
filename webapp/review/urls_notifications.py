"""The signed-in user's notifications (mentions), across projects: mounted at /notifications/."""

from django.urls import path

from webapp.review.views import activity

app_name = "notifications"
urlpatterns = [
    path("", activity.notifications, name="list"),
    path("<int:notification_id>/", activity.notification_open, name="open"),
]
