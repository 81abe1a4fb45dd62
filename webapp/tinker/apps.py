from django.apps import AppConfig


class TinkerConfig(AppConfig):
    name = "webapp.tinker"
    label = "tinker"
    verbose_name = "Tinker-compatible training API"
