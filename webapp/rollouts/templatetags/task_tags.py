"""`{% task_text task_id prompt answer %}`: a task as every page shows it — the first line of its prompt
(the whole prompt and the task id on hover) and its expected answer. The rule is
`webapp.rollouts.models.task_headline`; the live feed gets the same text from the ingestion's group
summaries.

Its markup is made here rather than by an included template: the explorer shows one per row, and a
sub-template rendered per row was a tenth of its page (docs/scale.md, "A team's year")."""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from webapp.rollouts.models import task_headline, task_hover

register = template.Library()

ANSWER_CHARS = 80


@register.simple_tag
def task_text(task_id: str, prompt: str = "", answer: str = "") -> SafeString:
    headline = task_headline(prompt, task_id)
    if not (prompt or "").strip():  # a bare task id reads as one
        headline = format_html("<code>{}</code>", headline)
    html = format_html(
        '<span class="task-text" data-task title="{}">{}</span>', task_hover(prompt, task_id), headline
    )
    if answer:
        html += format_html(
            ' <span class="task-answer muted small" data-task-answer>expected <strong>{}</strong></span>',
            Truncator(answer).chars(ANSWER_CHARS),
        )
    return html
