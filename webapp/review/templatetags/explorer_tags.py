"""The explorer's per-row cells that loop over a list (a row's top components, a search snippet's
segments), made here in one pass: a page shows 50 to 200 rows, and a template loop inside the row loop
cost more than the rest of the row (docs/scale.md, "A team's year"). The texts come from
`webapp.review.explorer.ExplorerRow`."""

from __future__ import annotations

from collections.abc import Iterable

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


@register.simple_tag
def explorer_components(texts: Iterable[tuple[str, str, str]]) -> SafeString:
    """`name weighted` of each top component ("raw × weight" on hover), comma-separated; — for none."""
    cells = [
        format_html('<span title="{}">{} {}</span>', detail, name, weighted)
        for name, weighted, detail in texts
    ]
    # Each cell is escaped by format_html; the separators are plain text.
    return mark_safe(", ".join(cells) if cells else '<span class="muted">—</span>')


@register.simple_tag
def snippet_marks(segments: Iterable[tuple[str, bool]]) -> SafeString:
    """A search snippet with what the query matched in <mark>."""
    return format_html_join(
        "", "{}", ((format_html("<mark>{}</mark>", text) if hit else text,) for text, hit in segments)
    )
