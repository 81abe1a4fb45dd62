"""The building blocks of the run event wire format (`trainers.sdk.wire`): the limits every value must fit,
and `Field` / `Shape`, the declaration each event, trajectory and turn field is written in. The shapes
themselves are in `trainers.sdk.wire_trajectory` (trajectories, turns, rewards, per-token statistics) and
`trainers.sdk.wire` (the events). Plain Python."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Integer columns: Django's PositiveIntegerField is a signed 32-bit `integer` on Postgres,
# BigIntegerField a 64-bit `bigint`. A value must fit its column, or the database refuses the batch.
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

MAX_TEXT = 200_000
# The dashboard answers 413 past this many events in one batch (its INGEST_MAX_EVENTS setting defaults to it).
MAX_EVENTS_PER_BATCH = 5000
MAX_ITEMS_PER_EVENT = 2000
MAX_TURNS_PER_TRAJECTORY = 2000
MAX_COMPONENTS = 100
MAX_METRICS_PER_EVENT = 10_000
MAX_METRIC_NAME = 100
MAX_TOKENS_PER_TURN = 1_000_000
# Free-form JSON objects (tool arguments, environment state, provenance) nest at most this deep: deeper
# documents are refused rather than risking Python's recursion limit when they are read back.
MAX_JSON_DEPTH = 32

# What the checker (`trainers.sdk.wire_check`) answers: field path → its messages.
Errors = dict[str, list[str]]


@dataclass(frozen=True)
class Field:
    """One field of a shape.

    `type`: integer | number | string | boolean | integers (a list of integers) | numbers (an object of
    name → number or null) | object (free-form JSON, depth-limited) | list (of objects of `items`) |
    record (one object of `items`) | halves / octets (a packed array: `pack_halves`, `pack_octets`;
    `max_length` counts entries).
    `column`: the model field a stored value lands in (None: not a column of its own). `default`: what is
    stored when the field is left out.
    """

    name: str
    type: str
    doc: str
    required: bool = False
    nullable: bool = False
    minimum: float | None = None
    maximum: float | None = None
    min_length: int = 0
    max_length: int | None = None
    choices: tuple[str, ...] | None = None
    items: Shape | None = None
    default: Any = None
    column: str | None = None


@dataclass(frozen=True)
class Shape:
    name: str
    fields: tuple[Field, ...]
    # Rules across fields: obj → [(field name, message)]; run when every field is valid on its own.
    rules: tuple[Callable[[dict[str, Any]], list[tuple[str, str]]], ...] = ()
    _by_name: dict[str, Field] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {f.name: f for f in self.fields})

    def __getitem__(self, name: str) -> Field:
        return self._by_name[name]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def columns(self) -> dict[str, Field]:
        """{model field: wire field} of the fields stored as columns."""
        return {f.column: f for f in self.fields if f.column}

    def stored_values(self, obj: dict[str, Any]) -> dict[str, Any]:
        """{model field: value} for a valid object, defaults filled in."""
        return {column: obj.get(f.name, f.default) for column, f in self.columns.items()}


def int_field(name: str, doc: str, *, maximum: int = INT32_MAX, minimum: int = 0, **kw: Any) -> Field:
    """An integer field; by default a count, step or index that fits a PositiveIntegerField column."""
    return Field(name, "integer", doc, minimum=minimum, maximum=maximum, **kw)
