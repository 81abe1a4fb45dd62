"""Template tags other pages use to show review data without their views knowing about it:
`{% unread_badge %}` in the header and `{% recent_activity project %}` on the project home."""

from __future__ import annotations

from django import template

from webapp.review import selectors
from webapp.review.activity_feed import activity_lines

register = template.Library()


@register.inclusion_tag("review/_unread_badge.html", takes_context=True)
def unread_badge(context) -> dict:
    request = context.get("request")
    user = getattr(request, "user", None)
    return {
        "unread": selectors.unread_notification_count(user),
        "signed_in": bool(user and user.is_authenticated),
    }


@register.inclusion_tag("review/_activity_list.html")
def recent_activity(project, limit: int = 10) -> dict:
    """The project home's latest lines (runs of judgements as one line, as on the activity page)."""
    return {
        "project": project,
        "lines": activity_lines(selectors.recent_activity(project=project, limit=limit * 4))[:limit],
        "compact": True,
    }


@register.inclusion_tag("review/_collaboration.html", takes_context=True)
def collaboration_panel(context) -> dict:
    """The discussion panel of `trajectory`, rendered inside the trajectory page (whose context has
    `project`, `can`, `user`); writes re-render it through webapp.review.views.collaboration."""
    from webapp.review.forms import CommentForm, FlagForm, TagForm

    trajectory = context["trajectory"]
    can = context.get("can", {})
    request = context.get("request")
    reader = getattr(request, "user", None) or context.get("user")
    turn_indexes = list(trajectory.turns.order_by("index").values_list("index", flat=True))
    return {
        "project": context["project"],
        "can": can,
        "user": context.get("user"),
        "csrf_token": context.get("csrf_token"),
        "trajectory": trajectory,
        "panel": selectors.collaboration_panel(trajectory, reader, can_launch=bool(can.get("launch"))),
        "comment_form": CommentForm(turn_indexes=turn_indexes, auto_id="id_comment_%s"),
        "tag_form": TagForm(auto_id="id_tag_%s"),
        "flag_form": FlagForm(auto_id="id_flag_%s"),
        "error": "",
    }
