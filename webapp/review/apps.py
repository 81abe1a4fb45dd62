from django.apps import AppConfig


class ReviewConfig(AppConfig):
    name = "webapp.review"
    label = "review"

    def ready(self) -> None:
        from webapp.review.services.activity import connect_activity_log

        connect_activity_log()
