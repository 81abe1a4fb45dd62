from django.apps import AppConfig


def _private_sqlite_files(sender, connection, **kwargs) -> None:
    """The embedded default's SQLite files are the owner's only (0600), like the folder they live in."""
    if connection.vendor == "sqlite":
        from pathlib import Path

        from webapp.core.env import make_private_files

        name = str(connection.settings_dict["NAME"])
        if name and not name.startswith(":memory:") and "mode=memory" not in name:
            make_private_files(Path(name), Path(f"{name}-wal"), Path(f"{name}-shm"))


class CoreConfig(AppConfig):
    name = "webapp.core"
    label = "core"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        connection_created.connect(_private_sqlite_files, dispatch_uid="core.private_sqlite_files")
