"""`{% task_text task_id prompt answer %}`: a task as every page shows it — the first line of its prompt
(the whole prompt and the task id on hover) and its expected answer. The rule is
`webapp.rollouts.models.task_headline`; the live feed gets the same text from the ingestion's group
summaries."""

from __future__ import annotations

from django import template

from webapp.rollouts.models import task_headline, task_hover

register = template.Library()


@register.inclusion_tag("rollouts/_task.html")
def task_text(task_id: str, prompt: str = "", answer: str = "") -> dict:
    return {
        "headline": task_headline(prompt, task_id),
        "hover": task_hover(prompt, task_id),
        "answer": answer or "",
        "plain": not (prompt or "").strip(),
    }
