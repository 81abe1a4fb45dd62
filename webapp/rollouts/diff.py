"""Comparing two trajectories: turn alignment, word-level text diffs, reward-breakdown and
environment-state differences. Pure functions on plain values (no database, no requests).

Alignment is role-aware: a turn is only ever paired with a turn of the same role. Identical turns
are anchored first (difflib over a fingerprint of each turn); the stretches between anchors are
aligned by dynamic programming that maximises the summed similarity of the pairs, so an inserted
tool call shows as a gap on one side instead of shifting every later turn out of line.

Word diffs keep every character of both texts (whitespace included) so the highlighted text is the
text. Model output is untrusted: `segments_html` escapes every piece before wrapping the changed
ones in <ins> / <del>, and is the only place that marks HTML safe.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from html import escape
from typing import Any, Protocol

from django.utils.safestring import SafeString, mark_safe

from trainers.registry import explanation_label

# Above this many cells (turns on the left × turns on the right of one unanchored stretch) the
# quadratic alignment gives way to a linear one over (role, tool) keys.
MAX_ALIGNMENT_CELLS = 250_000
# A text longer than this many tokens is compared line by line instead of word by word.
MAX_WORD_DIFF_TOKENS = 4_000
SAME_TOOL_BONUS = 0.5


class TurnLike(Protocol):
    role: str
    text: str
    tool_name: str
    tool_args: Any
    tool_result: str


# --- alignment -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlignedPair:
    """Indices into the two turn lists; None on one side is a gap (the turn exists on the other side only)."""

    left: int | None
    right: int | None


def _fingerprint(turn: TurnLike) -> tuple:
    args = json.dumps(turn.tool_args, sort_keys=True) if turn.tool_args is not None else ""
    return (turn.role, turn.tool_name or "", turn.text or "", args, turn.tool_result or "")


_WORD = re.compile(r"\w+", re.UNICODE)


def _word_set(turn: TurnLike) -> frozenset[str]:
    text = f"{turn.text or ''} {turn.tool_result or ''}"
    if turn.tool_args is not None:
        text += " " + json.dumps(turn.tool_args, sort_keys=True)
    return frozenset(word.lower() for word in _WORD.findall(text))


def _similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two word sets: cheap enough for every pair of a 100 × 100 stretch."""
    if not a and not b:
        return 1.0
    common = len(a & b)
    return common / (len(a) + len(b) - common)


def align_turns(
    left: Sequence[TurnLike], right: Sequence[TurnLike], fingerprints: tuple[list, list] | None = None
) -> list[AlignedPair]:
    """Pair the turns of two trajectories in order. Every turn appears exactly once; pairs never mix roles."""
    left_keys, right_keys = fingerprints or (
        [_fingerprint(t) for t in left],
        [_fingerprint(t) for t in right],
    )
    matcher = SequenceMatcher(None, left_keys, right_keys, autojunk=False)
    pairs: list[AlignedPair] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            pairs.extend(AlignedPair(i, j) for i, j in zip(range(i1, i2), range(j1, j2), strict=True))
        else:
            pairs.extend(_align_stretch(left, right, i1, i2, j1, j2))
    return pairs


def _align_stretch(left, right, i1: int, i2: int, j1: int, j2: int) -> list[AlignedPair]:
    n, m = i2 - i1, j2 - j1
    if n == 0 or m == 0:
        return [AlignedPair(i, None) for i in range(i1, i2)] + [AlignedPair(None, j) for j in range(j1, j2)]
    if n * m > MAX_ALIGNMENT_CELLS:
        return _align_by_keys(left, right, i1, i2, j1, j2)
    left_words = [_word_set(left[i]) for i in range(i1, i2)]
    right_words = [_word_set(right[j]) for j in range(j1, j2)]
    left_roles = [left[i].role for i in range(i1, i2)]
    right_roles = [right[j].role for j in range(j1, j2)]
    left_tools = [left[i].tool_name or "" for i in range(i1, i2)]
    right_tools = [right[j].tool_name or "" for j in range(j1, j2)]

    # score[i][j]: best total for left[:i] against right[:j]; a pair of the same role earns
    # 1 + similarity (+ a bonus for the same tool), a gap earns nothing.
    score = [[0.0] * (m + 1) for _ in range(n + 1)]
    move = [[0] * (m + 1) for _ in range(n + 1)]  # 0: pair, 1: gap on the right, 2: gap on the left
    for i in range(1, n + 1):
        move[i][0] = 1
    for j in range(1, m + 1):
        move[0][j] = 2
    for i in range(1, n + 1):
        row, above = score[i], score[i - 1]
        moves = move[i]
        role, tool, words = left_roles[i - 1], left_tools[i - 1], left_words[i - 1]
        for j in range(1, m + 1):
            # On ties the traceback (which runs backwards) takes right-only turns first, so a
            # replaced stretch reads "left-only turns, then right-only turns" like a unified diff.
            best, how = row[j - 1], 2
            if above[j] > best:
                best, how = above[j], 1
            if right_roles[j - 1] == role:
                paired = above[j - 1] + 1.0 + _similarity(words, right_words[j - 1])
                if tool and right_tools[j - 1] == tool:
                    paired += SAME_TOOL_BONUS
                if paired >= best:
                    best, how = paired, 0
            row[j] = best
            moves[j] = how
    reversed_pairs: list[AlignedPair] = []
    i, j = n, m
    while i > 0 or j > 0:
        how = move[i][j]
        if how == 0:
            reversed_pairs.append(AlignedPair(i1 + i - 1, j1 + j - 1))
            i, j = i - 1, j - 1
        elif how == 1:
            reversed_pairs.append(AlignedPair(i1 + i - 1, None))
            i -= 1
        else:
            reversed_pairs.append(AlignedPair(None, j1 + j - 1))
            j -= 1
    reversed_pairs.reverse()
    return reversed_pairs


def _align_by_keys(left, right, i1: int, i2: int, j1: int, j2: int) -> list[AlignedPair]:
    """Linear fallback for huge stretches: difflib over (role, tool), replaced runs paired in order by role."""
    keys_left = [(left[i].role, left[i].tool_name or "") for i in range(i1, i2)]
    keys_right = [(right[j].role, right[j].tool_name or "") for j in range(j1, j2)]
    pairs: list[AlignedPair] = []
    matcher = SequenceMatcher(None, keys_left, keys_right, autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if op == "equal":
            pairs.extend(
                AlignedPair(i1 + a, j1 + b) for a, b in zip(range(a1, a2), range(b1, b2), strict=True)
            )
            continue
        a, b = a1, b1
        while a < a2 or b < b2:
            if a < a2 and b < b2 and keys_left[a][0] == keys_right[b][0]:
                pairs.append(AlignedPair(i1 + a, j1 + b))
                a, b = a + 1, b + 1
            elif a < a2:
                pairs.append(AlignedPair(i1 + a, None))
                a += 1
            else:
                pairs.append(AlignedPair(None, j1 + b))
                b += 1
    return pairs


# --- word-level text diff ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """A piece of text: `equal` on both sides, `delete` only on the left, `insert` only on the right."""

    op: str
    text: str


# A word or a punctuation mark with the whitespace after it; leading whitespace on its own. Keeping
# whitespace out of the token list matters: a lone " " token is in every other position, and difflib's
# longest-match search over such popular tokens is ~10× slower on prose.
_TOKEN = re.compile(r"\w+\s*|[^\w\s]\s*|\s+", re.UNICODE)
_TRAILING_SPACE = re.compile(r"\s+$")


def tokenize(text: str) -> list[str]:
    """Words and single punctuation marks, each with its trailing whitespace; joined back they give `text`."""
    return _TOKEN.findall(text)


def _add(segments: list[Segment], op: str, text: str) -> None:
    """Append a piece, merging it into the previous one of the same kind."""
    if not text:
        return
    if segments and segments[-1].op == op:
        segments[-1] = Segment(op, segments[-1].text + text)
    else:
        segments.append(Segment(op, text))


def _add_changed(segments: list[Segment], op: str, text: str) -> None:
    """A changed run, its trailing whitespace left unhighlighted so highlights hug the words."""
    space = _TRAILING_SPACE.search(text)
    if space is None or space.start() == 0:
        _add(segments, op, text)
    else:
        _add(segments, op, text[: space.start()])
        _add(segments, "equal", text[space.start() :])


def word_diff(left: str, right: str) -> tuple[list[Segment], list[Segment]]:
    """Word-level diff of two texts: (left segments: equal / delete, right segments: equal / insert)."""
    left, right = left or "", right or ""
    if left == right:
        same = [Segment("equal", left)] if left else []
        return same, list(same)
    a, b = tokenize(left), tokenize(right)
    if len(a) + len(b) > 2 * MAX_WORD_DIFF_TOKENS:
        a, b = left.splitlines(keepends=True), right.splitlines(keepends=True)
    # The common head and tail need no search (difflib's longest-match search is the costly part).
    head, shortest = 0, min(len(a), len(b))
    while head < shortest and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < shortest - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    left_segments: list[Segment] = []
    right_segments: list[Segment] = []
    if head:
        _add(left_segments, "equal", "".join(a[:head]))
        _add(right_segments, "equal", "".join(b[:head]))
    middle_a, middle_b = a[head : len(a) - tail], b[head : len(b) - tail]
    for op, i1, i2, j1, j2 in SequenceMatcher(None, middle_a, middle_b, autojunk=False).get_opcodes():
        if op == "equal":
            text = "".join(middle_a[i1:i2])
            _add(left_segments, "equal", text)
            _add(right_segments, "equal", text)
            continue
        if i2 > i1:
            _add_changed(left_segments, "delete", "".join(middle_a[i1:i2]))
        if j2 > j1:
            _add_changed(right_segments, "insert", "".join(middle_b[j1:j2]))
    if tail:
        _add(left_segments, "equal", "".join(a[len(a) - tail :]))
        _add(right_segments, "equal", "".join(b[len(b) - tail :]))
    return left_segments, right_segments


_TAGS = {"delete": "del", "insert": "ins"}
_EMPTY = mark_safe("")


def segments_html(segments: Sequence[Segment]) -> SafeString:
    """HTML for one side of a word diff: every piece escaped, changed pieces in <del> / <ins>."""
    if not segments:
        return _EMPTY
    parts = []
    for segment in segments:
        text = escape(segment.text)
        tag = _TAGS.get(segment.op)
        parts.append(f"<{tag}>{text}</{tag}>" if tag else text)
    return mark_safe("".join(parts))  # every piece above went through escape()


# --- reward breakdown and environment state ------------------------------------------------------


@dataclass
class ComponentDelta:
    """One criterion on both sides; None where a side did not score it."""

    name: str
    kind: str = ""
    raw_left: float | None = None
    raw_right: float | None = None
    weight_left: float | None = None
    weight_right: float | None = None
    weighted_left: float | None = None
    weighted_right: float | None = None
    explanation_left: str = ""
    explanation_right: str = ""

    @property
    def explanation_label(self) -> str:
        return explanation_label(self.kind)

    @property
    def weighted_delta(self) -> float | None:
        if self.weighted_left is None or self.weighted_right is None:
            return None
        return self.weighted_right - self.weighted_left

    @property
    def raw_delta(self) -> float | None:
        if self.raw_left is None or self.raw_right is None:
            return None
        return self.raw_right - self.raw_left

    @property
    def weight_changed(self) -> bool:
        return None not in (self.weight_left, self.weight_right) and not math.isclose(
            self.weight_left, self.weight_right, abs_tol=1e-12
        )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def components_diff(left: Sequence[dict], right: Sequence[dict]) -> list[ComponentDelta]:
    """Per-criterion differences, matched by name, in the left side's order then the right's new names."""
    deltas: dict[str, ComponentDelta] = {}
    for side, components in (("left", left or []), ("right", right or [])):
        for component in components:
            if not isinstance(component, dict):
                continue
            name = str(component.get("name", ""))
            delta = deltas.setdefault(
                name, ComponentDelta(name=name, kind=str(component.get("kind", "") or ""))
            )
            setattr(delta, f"raw_{side}", _number(component.get("raw")))
            setattr(delta, f"weight_{side}", _number(component.get("weight")))
            setattr(delta, f"weighted_{side}", _number(component.get("weighted")))
            setattr(delta, f"explanation_{side}", str(component.get("explanation") or ""))
    return list(deltas.values())


@dataclass(frozen=True)
class JsonChange:
    """One difference between two JSON documents. `path` is like `inventory.items[2].count`."""

    path: str
    op: str  # added / removed / changed
    left: Any = None
    right: Any = None

    @property
    def left_json(self) -> str:
        return _short_json(self.left) if self.op != "added" else ""

    @property
    def right_json(self) -> str:
        return _short_json(self.right) if self.op != "removed" else ""


def _short_json(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_diff(left: Any, right: Any, path: str = "", *, limit: int = 500) -> list[JsonChange]:
    """Recursive difference of two JSON values: objects by key, arrays by position. At most `limit` changes."""
    changes: list[JsonChange] = []
    _json_diff(left, right, path, changes, limit)
    return changes


def _json_diff(left: Any, right: Any, path: str, changes: list[JsonChange], limit: int) -> None:
    if len(changes) >= limit:
        return
    if isinstance(left, dict) and isinstance(right, dict):
        for key in list(left) + [k for k in right if k not in left]:
            child = f"{path}.{key}" if path else str(key)
            if key not in right:
                changes.append(JsonChange(child, "removed", left=left[key]))
            elif key not in left:
                changes.append(JsonChange(child, "added", right=right[key]))
            else:
                _json_diff(left[key], right[key], child, changes, limit)
            if len(changes) >= limit:
                return
        return
    if isinstance(left, list) and isinstance(right, list):
        for index in range(max(len(left), len(right))):
            child = f"{path}[{index}]"
            if index >= len(right):
                changes.append(JsonChange(child, "removed", left=left[index]))
            elif index >= len(left):
                changes.append(JsonChange(child, "added", right=right[index]))
            else:
                _json_diff(left[index], right[index], child, changes, limit)
            if len(changes) >= limit:
                return
        return
    # bool is an int in Python; True == 1 must still count as a change of type.
    if type(left) is not type(right) or left != right:
        changes.append(JsonChange(path or "(root)", "changed", left=left, right=right))


# --- a whole comparison ------------------------------------------------------------------------------


@dataclass
class TurnComparison:
    """One row of the side-by-side view."""

    left: Any  # the left turn, or None for a gap
    right: Any
    same: bool
    left_text: SafeString = field(default_factory=lambda: mark_safe(""))
    right_text: SafeString = field(default_factory=lambda: mark_safe(""))
    left_result: SafeString = field(default_factory=lambda: mark_safe(""))
    right_result: SafeString = field(default_factory=lambda: mark_safe(""))
    left_args: SafeString = field(default_factory=lambda: mark_safe(""))
    right_args: SafeString = field(default_factory=lambda: mark_safe(""))
    args_changes: list[JsonChange] = field(default_factory=list)
    tool_changed: bool = False


def _pretty_args(args: Any) -> str:
    return json.dumps(args, indent=2, sort_keys=True, ensure_ascii=False) if args is not None else ""


def compare_turns(left: Sequence[TurnLike], right: Sequence[TurnLike]) -> list[TurnComparison]:
    """Align two turn lists and diff each pair word by word (tool arguments as JSON, results as text)."""
    rows: list[TurnComparison] = []
    left_keys, right_keys = [_fingerprint(t) for t in left], [_fingerprint(t) for t in right]
    for pair in align_turns(left, right, (left_keys, right_keys)):
        a = left[pair.left] if pair.left is not None else None
        b = right[pair.right] if pair.right is not None else None
        if a is None or b is None:
            # A turn on one side only: its cell is marked as a whole, its text stays plain.
            only = a or b
            html = segments_html([Segment("equal", only.text or "")])
            result = segments_html([Segment("equal", only.tool_result or "")])
            args = segments_html([Segment("equal", _pretty_args(only.tool_args))])
            row = TurnComparison(a, b, same=False)
            if a:
                row.left_text, row.left_result, row.left_args = html, result, args
            else:
                row.right_text, row.right_result, row.right_args = html, result, args
            rows.append(row)
            continue
        same = left_keys[pair.left] == right_keys[pair.right]
        text_left, text_right = word_diff(a.text or "", b.text or "")
        result_left, result_right = word_diff(a.tool_result or "", b.tool_result or "")
        args_left, args_right = word_diff(_pretty_args(a.tool_args), _pretty_args(b.tool_args))
        rows.append(
            TurnComparison(
                a,
                b,
                same=same,
                left_text=segments_html(text_left),
                right_text=segments_html(text_right),
                left_result=segments_html(result_left),
                right_result=segments_html(result_right),
                left_args=segments_html(args_left),
                right_args=segments_html(args_right),
                args_changes=[] if same else json_diff(a.tool_args, b.tool_args),
                tool_changed=(a.tool_name or "") != (b.tool_name or ""),
            )
        )
    return rows
