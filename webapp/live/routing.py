from django.urls import path

from webapp.live.consumers import ReviewConsumer, RunConsumer

websocket_urlpatterns = [
    path("ws/runs/<int:run_id>/", RunConsumer.as_asgi()),
    path("ws/review/", ReviewConsumer.as_asgi()),
]
