from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "webapp.api"
    label = "api"

    def ready(self) -> None:
        # Registers the OpenAPI description of our token authentication with drf-spectacular.
        from webapp.api import schema  # noqa: F401
