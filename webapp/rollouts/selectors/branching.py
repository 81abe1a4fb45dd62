"""A branched group (`rollout_strategy: branching`, trainers/rollout/branched.py) as the tree the group page
draws: each sample under the one it branched from, with where and why it branched (the turn, the shared
prefix, the entropy after the tool result against the sample's initial entropy), its reward, advantage and
the tool calls it made on its own segment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainers.rollout.branching import spent_tool_calls
from webapp.rollouts.models import Trajectory, Turn

# The tool result a branch point follows, as the tree shows it (the page links to the whole trajectory).
RESULT_PREVIEW_CHARS = 160


@dataclass
class BranchNode:
    trajectory: Trajectory
    depth: int
    own_tool_calls: int  # tool calls after the branch point (all of them for a global sample)
    branch: dict[str, Any] | None  # the trajectory's branch record (None: a global sample)
    after_result: str = ""  # the tool result the branch point came right after
    children: list[BranchNode] = field(default_factory=list)

    @property
    def rise_percent(self) -> float | None:
        rise = (self.branch or {}).get("rise")
        return None if rise is None else 100.0 * float(rise)


def branch_tree(members: Sequence[Trajectory]) -> list[BranchNode]:
    """The group's samples in tree order (each node after its parent, children by sample), depth set;
    [] when no sample of the group branched."""
    if not any(m.branch for m in members):
        return []
    by_sample = {m.sample_index: m for m in members}
    turns = _turns(members)
    nodes: dict[int, BranchNode] = {}
    for m in members:
        mine = turns.get(m.pk, [])
        own = spent_tool_calls([(t.role, t.tool_name) for t in mine], m.branch)
        start = int((m.branch or {}).get("turn") or 0)
        result = next((t.text for t in mine if t.index == start - 1), "") if m.branch else ""
        nodes[m.sample_index] = BranchNode(m, 0, own, m.branch, result[:RESULT_PREVIEW_CHARS])
    roots: list[BranchNode] = []
    for sample, node in sorted(nodes.items()):
        parent = (node.branch or {}).get("parent")
        if parent in by_sample and parent != sample:
            nodes[parent].children.append(node)
        else:
            roots.append(node)
    ordered: list[BranchNode] = []

    def walk(node: BranchNode, depth: int) -> None:
        node.depth = depth
        ordered.append(node)
        for child in node.children:
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    return ordered


def _turns(members: Sequence[Trajectory]) -> dict[int, list[Any]]:
    """Each member's turns (index, role, tool name, text) in one query."""
    out: dict[int, list[Any]] = {}
    rows = Turn.objects.filter(trajectory__in=[m.pk for m in members]).only(
        "trajectory_id", "index", "role", "tool_name", "text"
    )
    for t in rows.order_by("trajectory_id", "index"):
        out.setdefault(t.trajectory_id, []).append(t)
    return out
