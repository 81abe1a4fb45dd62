from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "webapp.fleet"
    label = "fleet"
    verbose_name = "Workers"

    def ready(self) -> None:
        from webapp.experiments.signals import run_moved
        from webapp.fleet.services import on_run_moved

        run_moved.connect(on_run_moved, dispatch_uid="fleet.run_moved")
