"""`{% when value %}`: one way every page shows a time, in the reader's zone with the zone named.

The server renders `<time datetime="…ISO, UTC…" data-when="relative">5 minutes ago</time>` (or, with
"exact", `data-when="exact"` and "2026-11-29 05:15 UTC"); static/js/when.js, loaded by base.html on every
page, rewrites the text in the browser's time zone ("29 Nov 2026, 06:15 CET") and gives a relative time
its exact time on hover. Without JavaScript the reader still sees UTC, named as such. A builtin of
the template engine (settings.TEMPLATES), so no template needs to load it:

    {% when comment.created_at %}              → "5 minutes ago", exact on hover
    {% when slot.expires_at "exact" %}         → "29 Nov 2026, 06:15 CET"
    {% when slot.expires_at "time" %}          → "06:15 CET" (a time later today)
    {% when run.heartbeat_at "seconds" %}      → "29 Nov 2026, 06:15:46 CET" (a run's clock: seconds count)
"""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince, timeuntil

register = template.Library()

STYLES = ("relative", "exact", "seconds", "time")


def _utc_text(value: datetime, style: str) -> str:
    utc = value.astimezone(UTC) if timezone.is_aware(value) else value
    if style == "time":
        return utc.strftime("%H:%M UTC")
    if style == "exact":
        return utc.strftime("%Y-%m-%d %H:%M UTC")
    if style == "seconds":
        return utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    now = timezone.now()
    if value > now:
        return f"in {timeuntil(value, now)}"
    return f"{timesince(value, now)} ago"


@register.simple_tag
def when(value: datetime | None, style: str = "relative", empty: str = "—") -> str:
    if value is None:
        return empty
    if style not in STYLES:
        raise template.TemplateSyntaxError(f"when: style is one of {', '.join(STYLES)}, not {style!r}")
    if timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    iso = value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    title = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return format_html(
        '<time datetime="{}" data-when="{}" title="{}">{}</time>', iso, style, title, _utc_text(value, style)
    )
