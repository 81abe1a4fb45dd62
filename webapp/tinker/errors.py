"""The one error the Tinker-compatible API answers with (its own module: services and selectors raise it)."""

from __future__ import annotations


class TinkerRefusal(Exception):
    """A request refused with a message the SDK shows: 401 for the key, 410 for a session that is over,
    400/403/404 for the rest."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


NOT_SUPPORTED = "is not supported by this server"
