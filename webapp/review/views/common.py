"""What several review pages share."""

from __future__ import annotations

from django.core.exceptions import ValidationError


def error_text(error: ValidationError) -> str:
    """A service's refusal as one line of plain words for a flash message or the panel."""
    return " ".join(error.messages)
