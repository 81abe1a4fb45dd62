"""The signed-in user's notifications (mentions), across projects: mounted at /notifications/."""

from django.urls import path

from webapp.review import views

app_name = "notifications"
urlpatterns = [
    path("", views.notifications, name="list"),
    path("<int:notification_id>/", views.notification_open, name="open"),
]
