from django.urls import path

from webapp.fleet import views

app_name = "fleet"
urlpatterns = [path("workers/", views.workers, name="workers")]
