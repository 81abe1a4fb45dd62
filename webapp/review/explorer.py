"""The trajectory explorer's query: find one page of a project's trajectories by what its runs scored and
what reviewers did (tags, preference judgements) — it reads both, so it lives in review, above rollouts.
The page's form is `webapp.review.forms.ExplorerForm`; saved views are written by
`webapp.review.services.saved_views`.

Pages are keyset-paginated: a cursor names the last (or first) row seen by its sort key and id, and
the next page asks for rows strictly after it, so pages never repeat or skip a row however many
trajectories arrive meanwhile, and page 1,000 costs what page 1 does (no OFFSET). A page is found in
two steps — its ids in sort order from one table chosen by the filters (`source_for`), read from
covering indexes, then its rows by id — so no trajectory row is visited per candidate. Total counts
are never taken: counting a million filtered rows is what makes explorers slow. How each filter and
sort is served is told in docs/review.md ("How it stays fast").

The query string is the state: filters, sort and page size all live in it, so any page can be shared
by its URL and saved as a view.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.http import QueryDict

from webapp.experiments.models import RubricVersion, Run
from webapp.projects.models import Project
from webapp.review.models import PreferencePair, TrajectoryTag
from webapp.rollouts import search
from webapp.rollouts.models import (
    CriterionScore,
    SavedView,
    Trajectory,
    TrajectorySearch,
    TrajectoryStatus,
)

PAGE_SIZES = (25, 50, 100, 200)
DEFAULT_PAGE_SIZE = 50
TOP_COMPONENTS = 3
# The query-string keys the explorer understands; anything else is dropped from saved views and links.
FILTER_KEYS = (
    "run",
    "split",
    "step_min",
    "step_max",
    "reward_min",
    "reward_max",
    "length_min",
    "length_max",
    "criterion",
    "criterion_value",
    "criterion_min",
    "criterion_max",
    "status",
    "tag",
    "annotation",
    "q",
    "sort",
    "page_size",
)


@dataclass(frozen=True)
class Sort:
    label: str
    key: str | None  # a Trajectory field, or None for insertion order (the id alone)
    descending: bool


SORTS: dict[str, Sort] = {
    "newest": Sort("Newest first", None, True),
    "oldest": Sort("Oldest first", None, False),
    "reward_desc": Sort("Reward, high to low", "reward", True),
    "reward_asc": Sort("Reward, low to high", "reward", False),
    "step_desc": Sort("Step, latest first", "step", True),
    "step_asc": Sort("Step, earliest first", "step", False),
}
DEFAULT_SORT = "newest"

ANNOTATION_STATES = [
    ("annotated", "Annotated (judged in a preference pair)"),
    ("not_annotated", "Not annotated"),
    ("in_queue", "In a preference queue"),
]


# --- filters ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExplorerFilters:
    run_ids: tuple[int, ...] = ()  # chosen runs; none chosen means all of the project's runs
    project_run_ids: tuple[int, ...] | None = None  # the project's runs, when the caller knows them already
    split: str = ""
    step_min: int | None = None
    step_max: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    length_min: int | None = None  # response length (completion tokens), as the run page's histogram bins it
    length_max: int | None = None
    criterion: str = ""
    criterion_value: str = "raw"
    criterion_min: float | None = None
    criterion_max: float | None = None
    statuses: tuple[str, ...] = ()
    tag_id: int | None = None
    annotation: str = ""
    text: str = ""
    sort: str = DEFAULT_SORT
    page_size: int = DEFAULT_PAGE_SIZE


# Values the form always submits that mean "nothing chosen": left out of addresses and saved views.
DEFAULT_VALUES = {"sort": DEFAULT_SORT, "page_size": str(DEFAULT_PAGE_SIZE), "criterion_value": "raw"}


def filter_query_string(params: QueryDict) -> str:
    """`params` reduced to the explorer's keys with values (no cursor, no defaults), in a stable order:
    what the address bar shows, what a saved view stores and what pagination links extend."""
    kept = QueryDict(mutable=True)
    for key in FILTER_KEYS:
        values = [
            value for value in params.getlist(key) if value.strip() and value != DEFAULT_VALUES.get(key)
        ]
        if values:
            kept.setlist(key, values)
    return kept.urlencode()


def criterion_names(project: Project) -> list[str]:
    """Criterion names of the project's rubrics (all versions), for the criterion field's suggestions."""
    names: set[str] = set()
    for spec in RubricVersion.objects.filter(rubric__project=project).values_list("spec", flat=True):
        for criterion in (spec or {}).get("criteria", []):
            if isinstance(criterion, dict) and isinstance(criterion.get("name"), str):
                names.add(criterion["name"])
    return sorted(names)


# --- the query --------------------------------------------------------------------------------------


# Which table answers a page's query, and what the trajectory's id is called in it. TrajectorySearch and
# CriterionScore repeat the columns every filter and sort needs (run, split, step, status, reward).
TRAJECTORY_ID = {Trajectory: "id", TrajectorySearch: "trajectory_id", CriterionScore: "trajectory_id"}


def source_for(filters: ExplorerFilters) -> type[Trajectory] | type[TrajectorySearch] | type[CriterionScore]:
    """The table a page is found in: a text search reads the search table (the full-text index
    intersected with the run index, the matches sorted there); a criterion filter reads the range of
    the criterion's (name, value) index and sorts it; anything else reads trajectories in sort order.
    None of them visits a trajectory row per candidate — only the page's rows are fetched."""
    if filters.text:
        return TrajectorySearch
    if filters.criterion:
        return CriterionScore
    return Trajectory


def trajectory_filter(
    *,
    project: Project,
    filters: ExplorerFilters,
    model: type[Trajectory] | type[TrajectorySearch] | type[CriterionScore] = Trajectory,
) -> QuerySet:
    """The project's trajectories that pass every filter, unordered, as rows of `model` (one of
    TRAJECTORY_ID's tables; its trajectory id is TRAJECTORY_ID[model])."""
    id_field = TRAJECTORY_ID[model]
    # The runs as a list of ids, not a join on run.project: the planner then knows how much of the table
    # they hold and picks a scan in sort order (a big project) or an index on run (a small one).
    run_ids = list(filters.run_ids) or list(
        filters.project_run_ids
        if filters.project_run_ids is not None
        else Run.objects.filter(project=project).values_list("pk", flat=True)
    )
    trajectories = model.objects.filter(run_id__in=run_ids)
    if filters.split:
        trajectories = trajectories.filter(split=filters.split)
    if filters.step_min is not None:
        trajectories = trajectories.filter(step__gte=filters.step_min)
    if filters.step_max is not None:
        trajectories = trajectories.filter(step__lte=filters.step_max)
    if filters.reward_min is not None:
        trajectories = trajectories.filter(reward__gte=filters.reward_min)
    if filters.reward_max is not None:
        trajectories = trajectories.filter(reward__lte=filters.reward_max)
    if filters.length_min is not None or filters.length_max is not None:
        # Lengths live on the trajectory row only: other tables intersect with the runs' rows in range.
        lengths = {
            f"completion_tokens__{op}": bound
            for op, bound in (("gte", filters.length_min), ("lte", filters.length_max))
            if bound is not None
        }
        if model is Trajectory:
            trajectories = trajectories.filter(**lengths)
        else:
            in_range = Trajectory.objects.filter(run_id__in=run_ids, **lengths).values("id")
            trajectories = trajectories.filter(**{f"{id_field}__in": in_range})
    if filters.statuses and set(filters.statuses) != set(TrajectoryStatus.values):
        trajectories = trajectories.filter(status__in=filters.statuses)
    if filters.criterion:
        conditions = search.criterion_conditions(
            name=filters.criterion,
            value=filters.criterion_value,
            minimum=filters.criterion_min,
            maximum=filters.criterion_max,
        )
        if model is CriterionScore:
            trajectories = trajectories.filter(**conditions)
        else:
            scores = CriterionScore.objects.filter(**conditions).values("trajectory_id")
            trajectories = trajectories.filter(**{f"{id_field}__in": scores})
    if filters.tag_id is not None:
        tagged = TrajectoryTag.objects.filter(tag_id=filters.tag_id).values("trajectory_id")
        trajectories = trajectories.filter(**{f"{id_field}__in": tagged})
    if filters.annotation:
        trajectories = annotation_filter(trajectories, filters.annotation, id_field=id_field)
    if filters.text:
        trajectories = search.filter_matching(trajectories, filters.text, id_field=id_field)
    return trajectories


def annotation_filter(trajectories: QuerySet, state: str, *, id_field: str = "id") -> QuerySet:
    """annotated: some judgement was recorded on a preference pair that contains the trajectory;
    not_annotated: none was; in_queue: it is in a pair of some preference queue (judged or not)."""
    if state == "in_queue":
        pairs = PreferencePair.objects.all()
    elif state in ("annotated", "not_annotated"):
        pairs = PreferencePair.objects.filter(judgement_count__gt=0)
    else:
        raise ValueError(f"unknown annotation state {state!r}")
    in_pairs = Q(**{f"{id_field}__in": pairs.values("a_id")}) | Q(**{f"{id_field}__in": pairs.values("b_id")})
    return trajectories.exclude(in_pairs) if state == "not_annotated" else trajectories.filter(in_pairs)


# --- keyset pagination -------------------------------------------------------------------------------


class InvalidCursor(ValueError):
    pass


@dataclass(frozen=True)
class Cursor:
    """A position in one sort: rows strictly after (or before) the row with this key and id."""

    sort: str
    before: bool
    key: float | int | None
    id: int

    def encode(self) -> str:
        raw = json.dumps([self.sort, "b" if self.before else "a", self.key, self.id], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str, *, sort: str) -> Cursor:
        try:
            sort_name, direction, key, row_id = json.loads(
                base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            )
        except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError, ValueError, TypeError) as error:
            raise InvalidCursor("This cursor is not one the explorer made.") from error
        if sort_name != sort:
            raise InvalidCursor("This cursor belongs to another sort order.")
        expected = SORTS[sort].key
        valid_key = (
            key is None
            if expected is None
            else _is_number(key) and (expected != "step" or isinstance(key, int))
        )
        if (
            direction not in ("a", "b")
            or not valid_key
            or not isinstance(row_id, int)
            or isinstance(row_id, bool)
        ):
            raise InvalidCursor("This cursor is not one the explorer made.")
        return cls(sort_name, direction == "b", key, row_id)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _beyond(sort: Sort, cursor: Cursor, model: type) -> Q | RawSQL:
    """Rows strictly beyond the cursor in the direction of travel, as one row-value comparison that a
    (key, id) index answers as a range: `(reward, id) < (0.5, 1234)`."""
    forward_is_down = sort.descending != cursor.before
    op = "<" if forward_is_down else ">"
    id_field = TRAJECTORY_ID[model]
    if sort.key is None:
        return Q(**{f"{id_field}__{'lt' if forward_is_down else 'gt'}": cursor.id})
    table, id_column = model._meta.db_table, model._meta.get_field(id_field).column
    return RawSQL(
        f'("{table}"."{sort.key}", "{table}"."{id_column}") {op} (%s, %s)',
        [cursor.key, cursor.id],
        output_field=BooleanField(),
    )


def _ordering(sort: Sort, model: type, *, reverse: bool) -> list[str]:
    descending = sort.descending != reverse
    sign = "-" if descending else ""
    id_field = TRAJECTORY_ID[model]
    return [f"{sign}{sort.key}", f"{sign}{id_field}"] if sort.key else [f"{sign}{id_field}"]


@dataclass
class ExplorerRow:
    trajectory: Trajectory
    tags: list[Any] = field(default_factory=list)  # review.Tag
    top_components: list[dict[str, Any]] = field(default_factory=list)
    snippet: list[search.Segment] = field(default_factory=list)

    # Numbers formatted once here: template filters cost tens of microseconds each, and a page of 200
    # rows has well over a thousand of them.
    @property
    def reward_text(self) -> str:
        return f"{self.trajectory.reward:.3f}"

    @property
    def component_texts(self) -> list[tuple[str, str, str]]:
        """(name, weighted value, "raw × weight") of the top components."""
        return [
            (
                str(c.get("name", "")),
                f"{c['weighted']:.2f}",
                f"raw {_number(c.get('raw'))} × weight {_number(c.get('weight'))}",
            )
            for c in self.top_components
        ]


def _number(value: Any) -> str:
    return f"{value:g}" if _is_number(value) else "?"


@dataclass
class ExplorerPage:
    rows: list[ExplorerRow]
    next_cursor: str | None
    previous_cursor: str | None
    filters: ExplorerFilters
    notice: str = ""


ROW_FIELDS = (
    "id",
    "run",
    "run__name",
    "step",
    "split",
    "group_index",
    "sample_index",
    "task_id",
    "prompt",
    "answer",
    "reward",
    "advantage",
    "components",
    "status",
    "num_turns",
    "num_tool_calls",
    "policy_version",
    "created_at",
)


def explorer_page(*, project: Project, filters: ExplorerFilters, cursor: str | None = None) -> ExplorerPage:
    """One page of the project's trajectories under `filters`, after (or before) `cursor`.
    Raises InvalidCursor for a cursor this sort did not make."""
    position = Cursor.decode(cursor, sort=filters.sort) if cursor else None
    sort = SORTS[filters.sort]
    model = source_for(filters)
    trajectories = trajectory_filter(project=project, filters=filters, model=model)
    if model is CriterionScore and sort.key == "reward":
        rewards = search.criterion_reward_range(
            name=filters.criterion,
            value=filters.criterion_value,
            minimum=filters.criterion_min,
            maximum=filters.criterion_max,
        )
        if (
            rewards is not None
        ):  # implied by the criterion range: changes no result, only where the scan starts
            trajectories = trajectories.filter(reward__gte=rewards[0], reward__lte=rewards[1])
    if position is not None:
        trajectories = trajectories.filter(_beyond(sort, position, model))
    backwards = position is not None and position.before
    size = filters.page_size
    # Two steps: the page's keys first, reading only the sort key, the id and the filter columns (from a
    # covering index on Postgres), then the page's rows by id.
    id_field = TRAJECTORY_ID[model]
    key_columns = [sort.key, id_field] if sort.key else [id_field]
    keys = list(
        trajectories.order_by(*_ordering(sort, model, reverse=backwards)).values_list(*key_columns)[
            : size + 1
        ]
    )
    more = len(keys) > size
    keys = list(dict.fromkeys(keys[:size]))  # a trajectory with two components of one name comes once
    if backwards:
        keys.reverse()
    rows = (
        Trajectory.objects.filter(pk__in=[k[-1] for k in keys])
        .select_related("run")
        .only(*ROW_FIELDS)
        .in_bulk()
    )
    keys = [k for k in keys if k[-1] in rows]  # a trajectory deleted between the two steps is skipped
    found = [rows[k[-1]] for k in keys]

    def cursor_at(key: tuple, before: bool) -> str:
        return Cursor(filters.sort, before, key[0] if sort.key else None, key[-1]).encode()

    if not found:
        # Past either end (rows were deleted, or a stale link): the page offers the first page instead.
        next_cursor = previous_cursor = None
    else:
        has_next = more if not backwards else True
        has_previous = more if backwards else position is not None
        next_cursor = cursor_at(keys[-1], before=False) if has_next else None
        previous_cursor = cursor_at(keys[0], before=True) if has_previous else None
    notice = ""
    if not found and filters.text and not search.has_search_terms(filters.text):
        notice = (
            "The text query has only very common words or symbols, which are not indexed: nothing matches it."
        )
    return ExplorerPage(_decorate(found, filters.text), next_cursor, previous_cursor, filters, notice)


def _decorate(trajectories: list[Trajectory], text: str) -> list[ExplorerRow]:
    ids = [t.pk for t in trajectories]
    tags: dict[int, list[Any]] = {}
    for link in (
        TrajectoryTag.objects.filter(trajectory_id__in=ids).select_related("tag").order_by("tag__name")
    ):
        tags.setdefault(link.trajectory_id, []).append(link.tag)
    snippets = search.snippets(ids, text) if text and ids else {}
    return [
        ExplorerRow(
            trajectory=t,
            tags=tags.get(t.pk, []),
            top_components=top_components(t.components),
            snippet=snippets.get(t.pk, []),
        )
        for t in trajectories
    ]


def top_components(components: Any, limit: int = TOP_COMPONENTS) -> list[dict[str, Any]]:
    """The components that moved the reward most (largest |weighted|), for a compact column."""
    usable = [c for c in components or [] if isinstance(c, dict) and _is_number(c.get("weighted"))]
    return sorted(usable, key=lambda c: -abs(c["weighted"]))[:limit]


# --- links to the trajectory and group views ------------------------------------------------------------


def row_links(slug: str) -> Callable[[Trajectory], dict[str, str]]:
    """URLs of a row's run, trajectory view and group view (reversed by name; their paths otherwise).
    Each name is reversed once, with stand-ins for the row's numbers that are then formatted per row: a
    page of 50 rows made 150 reverse() calls, a tenth of the explorer's time."""
    trajectory_url = _url_format("rollouts:trajectory_detail", slug, 1, "/p/{}/trajectories/{}/")
    group_url = _url_format("rollouts:group_detail", slug, 3, "/p/{}/runs/{}/groups/{}/{}/")
    run_url = _url_format("experiments:run_detail", slug, 1, "/p/{}/runs/{}/")

    def links(trajectory: Trajectory) -> dict[str, str]:
        group = group_url.format(trajectory.run_id, trajectory.step, trajectory.group_index)
        return {
            "trajectory": trajectory_url.format(trajectory.pk),
            # A group is named by its split too: an evaluation group's page without ?split=eval is a 404.
            "group": f"{group}?split={trajectory.split}",
            "run": run_url.format(trajectory.run_id),
        }

    return links


# Stand-ins for the numbers of a URL: reversed, then replaced by "{}".
_STAND_INS = (900_000_001, 900_000_002, 900_000_003)


def _url_format(name: str, slug: str, numbers: int, fallback: str) -> str:
    """The URL of `name` for the project `slug` as a str.format pattern of its `numbers` integer
    arguments; `fallback` (its path, "{}" for the slug and each number) where the name does not reverse."""
    from django.urls import NoReverseMatch, reverse

    stand_ins = _STAND_INS[:numbers]
    try:
        url = reverse(name, args=[slug, *stand_ins])
    except NoReverseMatch:
        return fallback.replace("{}", slug.replace("{", "{{").replace("}", "}}"), 1)
    pattern = url.replace("{", "{{").replace("}", "}}")
    for stand_in in reversed(stand_ins):  # from the right: the numbers come after the slug
        head, _, tail = pattern.rpartition(str(stand_in))
        pattern = f"{head}{{}}{tail}"
    return pattern


def saved_view_list(*, project: Project, user) -> QuerySet[SavedView]:
    """The user's own saved views of the explorer, by name (written by `services.saved_views`)."""
    return SavedView.objects.filter(project=project, user=user).order_by("name")
