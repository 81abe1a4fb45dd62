"""3–8 trajectories of one task side by side, turn by turn (the many-way compare page).

Turns are aligned by position (turn i of each trajectory in one row); each cell is word-diffed against the
first trajectory's turn in its row, so what differs from the reference is highlighted, and a row where all
agree is marked so the page can hide it. Long trajectories are cut at MAX_ROWS rows (the pairwise diff
reads the rest).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString

from webapp.rollouts.diff import segments_html, word_diff
from webapp.rollouts.models import Trajectory, Turn

MIN_TRAJECTORIES, MAX_TRAJECTORIES = 2, 8
MAX_ROWS = 300


@dataclass(frozen=True)
class Cell:
    role: str
    tool_name: str
    html: SafeString  # the turn's text, escaped, with what differs from the reference in <ins>
    same: bool  # the same role, tool and text as the reference's turn in this row


@dataclass(frozen=True)
class Row:
    index: int
    cells: list[Cell | None]  # None: that trajectory has no turn here

    @property
    def all_same(self) -> bool:
        return all(cell is not None and cell.same for cell in self.cells)


def _text(turn: Turn) -> str:
    return turn.text or turn.tool_result or ""


def compare_rows(turn_lists: Sequence[Sequence[Turn]]) -> tuple[list[Row], bool]:
    """Rows of aligned turns, and whether the trajectories were cut at MAX_ROWS."""
    longest = max((len(turns) for turns in turn_lists), default=0)
    rows = []
    for index in range(min(longest, MAX_ROWS)):
        reference = turn_lists[0][index] if index < len(turn_lists[0]) else None
        cells: list[Cell | None] = []
        for column, turns in enumerate(turn_lists):
            if index >= len(turns):
                cells.append(None)
                continue
            turn = turns[index]
            if column == 0 or reference is None:
                html = SafeString(escape(_text(turn)))
                same = column == 0
            else:
                same = (turn.role, turn.tool_name, _text(turn)) == (
                    reference.role,
                    reference.tool_name,
                    _text(reference),
                )
                html = segments_html(word_diff(_text(reference), _text(turn))[1])
            cells.append(Cell(turn.role, turn.tool_name, html, same))
        rows.append(Row(index, cells))
    return rows, longest > MAX_ROWS


def task_across_steps(*, trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """Up to MAX_TRAJECTORIES of one task's trajectories spread evenly over its steps (first and last
    kept), one per step: the first sample."""
    by_step: dict[int, Trajectory] = {}
    for trajectory in trajectories:  # ordered by step, then sample
        by_step.setdefault(trajectory.step, trajectory)
    chosen = [by_step[step] for step in sorted(by_step)]
    if len(chosen) <= MAX_TRAJECTORIES:
        return chosen
    last = len(chosen) - 1
    picks = sorted({round(i * last / (MAX_TRAJECTORIES - 1)) for i in range(MAX_TRAJECTORIES)})
    return [chosen[i] for i in picks]
