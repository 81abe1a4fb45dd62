"""`{{ value|fixed:3 }}`: a number to so many decimals by the one rounding rule of the figures a run shows —
Python's format(value, ".3f"), as the trainer writes its log lines and static/js/run/dom.js's fixed() writes
the live page (the exact value rounded, an exact tie to even; Django's floatformat rounds the decimal repr
half up, so 0.5625 read 0.563 beside a log line saying 0.562). "—" for no number."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def fixed(value: Any, digits: int = 3) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    return format(float(value), f".{int(digits)}f")
