"""HTML for the aligned rows of the diff page.

Built in Python rather than with a template include per cell: two hundred includes cost more than
the alignment and the word diffs together (measured with bench/trajectory_view.py), and the diff of
two 100-turn trajectories must render within 100 ms. The markup is the template's: see
templates/rollouts/diff.html for the page around it and static/css/trajectory.css for the classes.

Every value that came from a trajectory goes through `escape` here; the highlighted texts arrive as
SafeStrings from webapp.rollouts.diff.segments_html, which escaped them piece by piece.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape

from django.utils.safestring import SafeString, mark_safe

from webapp.rollouts.diff import TurnComparison

_CLASS_UNSAFE = re.compile(r"[^a-z0-9_-]+")


def _role_class(role: str) -> str:
    return "role-" + _CLASS_UNSAFE.sub("-", (role or "").lower())


def _cell(row: TurnComparison, side: str) -> str:
    turn = row.left if side == "left" else row.right
    if turn is None:
        return '<div class="cell gap" aria-label="no matching turn"></div>'
    one_sided = row.left is None or row.right is None
    text, args, result = (
        (row.left_text, row.left_args, row.left_result)
        if side == "left"
        else (row.right_text, row.right_args, row.right_result)
    )
    parts = [
        f'<div class="cell {_role_class(turn.role)}{" only " + side if one_sided else ""}">',
        f'<div class="turn-head"><span class="turn-index">#{int(turn.index)}</span><span class="role">{escape(turn.role)}</span>',
    ]
    if turn.reward is not None:
        parts.append(f"<span>reward {float(turn.reward):.4f}</span>")
    judged = getattr(turn, "judged_reward", None)  # from turn judgements (webapp.review.selectors)
    if judged is not None:
        sign = " pos" if judged > 0 else " neg" if judged < 0 else ""
        parts.append(
            f'<span class="turn-reward judged{sign}" data-judged-reward="{float(judged)}" '
            f'title="per-turn reward attributed from turn judgements">judged {float(judged):.2f}</span>'
        )
    if one_sided:
        parts.append(f'<span class="muted">only in {"A" if side == "left" else "B"}</span>')
    parts.append("</div>")
    if turn.text:
        parts.append(f"<pre>{text}</pre>")
    if turn.tool_name or turn.tool_args is not None or turn.tool_result:
        kind = "tool result" if turn.role == "tool" else "tool call"
        name_class = ' class="changed-name"' if row.tool_changed else ""
        parts.append(
            f'<div class="tool-card"><div><span class="muted small">{kind}</span> '
            f"<code{name_class}>{escape(turn.tool_name or '(unnamed)')}</code></div>"
        )
        if turn.tool_args is not None:
            parts.append(f'<div class="label">arguments</div><pre>{args}</pre>')
        if turn.tool_result:
            parts.append(f'<div class="label">result</div><pre>{result}</pre>')
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)


def rows_html(rows: Sequence[TurnComparison]) -> SafeString:
    """Both cells of every aligned row, in order (a two-column grid lays them out side by side)."""
    parts = []
    for number, row in enumerate(rows):
        state = "same" if row.same else "row-changed"
        parts.append(f'<div class="diff-row-left {state}" data-row="{number}">{_cell(row, "left")}</div>')
        parts.append(f'<div class="diff-row-right {state}" data-row="{number}">{_cell(row, "right")}</div>')
    return mark_safe("".join(parts))  # model text escaped above or by segments_html
