"""What the explorer finds trajectories by: a full-text document per trajectory and one row per rubric
component. Both are written at ingestion (`index_new_trajectories`, set-based, no per-row queries) and
can be rebuilt from stored trajectories and turns (`reindex_trajectories`).

Full-text search, by database:
- Postgres: `TrajectorySearch.document` is a `tsvector` (English stemming, GIN index). The query is
  `websearch_to_tsquery`: words must all appear (in any turn or the prompt), "quoted phrases", `or`,
  `-word` to exclude. Snippets come from `ts_headline` over the page's trajectories only.
- SQLite (the embedded demo): the same table holds the plain text and an FTS5 index over it (porter
  stemming, kept in sync by triggers; see migration 0002). The query syntax is translated to FTS5 with
  every word quoted, so no user input can be an FTS5 syntax error; snippets come from FTS5's
  `snippet()`. We chose FTS5 over LIKE because it gives the same word-and-stem semantics as Postgres
  (tests run the same assertions on both) and stays fast well past demo sizes.

Search text is untrusted model output: snippets are returned as (text, is_match) segments that the
templates escape; nothing here builds HTML.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL

from webapp.rollouts.models import CriterionScore, Trajectory, TrajectorySearch, Turn

TEXT_SEARCH_CONFIG = "english"
# A tsvector is at most 1 MB and positions stop at 16,383: a capped document keeps ingestion safe for
# any trajectory (2,000 turns of 200k characters would not fit) and still covers what people search.
MAX_DOCUMENT_CHARS = 100_000
MAX_SNIPPET_SOURCE_CHARS = 20_000
# Private-use characters mark the matches inside snippets; they are removed from the text beforehand,
# so a trajectory cannot forge a highlight.
MATCH_START, MATCH_END = "\ue000", "\ue001"
FTS_TABLE = "rollouts_trajectory_fts"
# Postgres's parser reads "<answer>" or "<tool_call>" as an HTML tag and drops it — but in agent
# transcripts those are words people search for. A space in place of "<" keeps them (documents and
# queries alike); excerpts swap "<" for a private-use character instead, and back after ts_headline.
TAG_OPEN = "\ue002"


def tsvector_sql(expression: str) -> str:
    """SQL for the search vector of a text expression (Postgres)."""
    return f"to_tsvector('{TEXT_SEARCH_CONFIG}', translate({expression}, '<', ' '))"


def tsquery_sql(expression: str) -> str:
    """SQL for the query of a user's search text (Postgres)."""
    return f"websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', translate({expression}, '<', ' '))"


_MARKERS = re.compile(f"[{MATCH_START}{MATCH_END}\ue002\x00]")


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


# --- documents --------------------------------------------------------------------------------------


def document_text(prompt: str, turns: Iterable[dict[str, Any]]) -> str:
    """The searchable text of one trajectory: its prompt, then each turn's text, tool name, tool
    arguments and tool result, capped at MAX_DOCUMENT_CHARS."""
    parts = [prompt or ""]
    for turn in turns:
        parts.append(turn.get("text") or "")
        if turn.get("tool_name"):
            parts.append(turn["tool_name"])
        if turn.get("tool_args"):
            parts.append(json.dumps(turn["tool_args"], ensure_ascii=False))
        if turn.get("tool_result"):
            parts.append(turn["tool_result"])
    text = _MARKERS.sub(" ", "\n".join(part for part in parts if part))
    return text[:MAX_DOCUMENT_CHARS]


SearchRow = tuple[int, int, int, str, str, float, str]  # trajectory, run, step, split, status, reward, text
_SEARCH_COLUMNS = ("trajectory_id", "run_id", "step", "split", "status", "reward", "document")


def _search_row(trajectory: Trajectory | dict[str, Any], text: str) -> SearchRow:
    get = trajectory.get if isinstance(trajectory, dict) else lambda name: getattr(trajectory, name)
    return (get("pk"), get("run_id"), get("step"), get("split"), get("status"), get("reward"), text)


def _write_documents(rows: Sequence[SearchRow]) -> None:
    """Insert search rows, replacing any earlier row of those trajectories."""
    if not rows:
        return
    table = TrajectorySearch._meta.db_table
    columns = ", ".join(_SEARCH_COLUMNS)
    with connection.cursor() as cursor:
        if is_postgres():
            types = ("bigint", "bigint", "integer", "text", "text", "float8", "text")
            for start in range(0, len(rows), 5000):
                chunk = rows[start : start + 5000]
                arrays = ", ".join(f"%s::{t}[]" for t in types)
                cursor.execute(
                    f"INSERT INTO {table} ({columns}) "
                    f"SELECT t.id, t.run, t.step, t.split, t.status, t.reward, {tsvector_sql('t.doc')} "
                    f"FROM unnest({arrays}) AS t(id, run, step, split, status, reward, doc) "
                    "ON CONFLICT (trajectory_id) DO UPDATE SET document = EXCLUDED.document, run_id = EXCLUDED.run_id, "
                    "step = EXCLUDED.step, split = EXCLUDED.split, status = EXCLUDED.status, reward = EXCLUDED.reward",
                    [[row[i] for row in chunk] for i in range(len(types))],
                )
        else:
            # Not INSERT OR REPLACE: SQLite fires no delete trigger for a replaced row, and the FTS index
            # would keep the old text.
            ids = [row[0] for row in rows]
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                cursor.execute(
                    f"DELETE FROM {table} WHERE trajectory_id IN ({', '.join(['%s'] * len(chunk))})", chunk
                )
            placeholders = ", ".join(["%s"] * len(_SEARCH_COLUMNS))
            cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({placeholders})", rows)


ScoreRow = tuple[int, int, int, str, str, float, str, float, float]
_SCORE_COLUMNS = ("trajectory_id", "run_id", "step", "split", "status", "reward", "name", "raw", "weighted")


def _write_scores(rows: Sequence[ScoreRow]) -> None:
    """Insert criterion-score rows (in _SCORE_COLUMNS order): COPY on Postgres."""
    if not rows:
        return
    table = CriterionScore._meta.db_table
    columns = ", ".join(_SCORE_COLUMNS)
    with connection.cursor() as cursor:
        if is_postgres():
            with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            placeholders = ", ".join(["%s"] * len(_SCORE_COLUMNS))
            cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({placeholders})", rows)


def _score_rows(trajectory: Trajectory | dict[str, Any]) -> list[ScoreRow]:
    get = trajectory.get if isinstance(trajectory, dict) else lambda name: getattr(trajectory, name)
    components = get("components")
    head = (get("pk"), get("run_id"), get("step"), get("split"), get("status"), get("reward"))
    rows = []
    for component in components if isinstance(components, list) else []:
        if not isinstance(component, dict) or not isinstance(component.get("name"), str):
            continue
        raw, weighted = component.get("raw"), component.get("weighted")
        if _finite(raw) and _finite(weighted):
            rows.append((*head, component["name"][:200], float(raw), float(weighted)))
    return rows


def _finite(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value == value
        and abs(value) != float("inf")
    )


def index_new_trajectories(trajectories: Sequence[Trajectory], items: Sequence[dict[str, Any]]) -> None:
    """Ingestion's hook: the search documents and criterion scores of trajectories just inserted (with
    their ids), from the validated event items they were built from. Two statements per batch."""
    documents = [
        _search_row(t, document_text(t.prompt, item.get("turns", [])))
        for t, item in zip(trajectories, items, strict=True)
    ]
    scores = [row for t in trajectories for row in _score_rows(t)]
    _write_documents(documents)
    _write_scores(scores)


def reindex_trajectories(trajectories: QuerySet[Trajectory] | None = None, *, batch_size: int = 2000) -> int:
    """Rebuild the search documents and criterion scores of `trajectories` (all when None) from what is
    stored. For data written without ingestion (fixtures, imports, the migration's backfill). Returns
    how many trajectories were indexed."""
    queryset = (trajectories if trajectories is not None else Trajectory.objects.all()).order_by("pk")
    done = 0
    last = 0
    while True:
        chunk = list(
            queryset.filter(pk__gt=last).values(
                "pk", "run_id", "step", "split", "status", "reward", "prompt", "components"
            )[:batch_size]
        )
        if not chunk:
            return done
        ids = [row["pk"] for row in chunk]
        turns: dict[int, list[dict[str, Any]]] = {}
        for turn in (
            Turn.objects.filter(trajectory_id__in=ids)
            .order_by("trajectory_id", "index")
            .values("trajectory_id", "text", "tool_name", "tool_args", "tool_result")
        ):
            turns.setdefault(turn["trajectory_id"], []).append(turn)
        CriterionScore.objects.filter(trajectory_id__in=ids).delete()
        _write_documents(
            [_search_row(row, document_text(row["prompt"], turns.get(row["pk"], []))) for row in chunk]
        )
        _write_scores([score for row in chunk for score in _score_rows(row)])
        done += len(chunk)
        last = ids[-1]


# --- queries ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fts5Query:
    """A user's query in FTS5 syntax: rows must match `include` (when set) and not match `exclude`."""

    include: str | None
    exclude: str | None


_TOKEN = re.compile(r'(-?)"([^"]*)"?|(\S+)')


def _fts5_string(text: str) -> str | None:
    # A quoted FTS5 string is tokenized like the document: "x+y" is the phrase x y. Words without a
    # letter or digit would be empty strings, which FTS5 rejects.
    if not re.search(r"\w", text):
        return None
    return '"' + text.replace('"', '""') + '"'


def fts5_query(text: str) -> Fts5Query:
    """Translate the websearch syntax (words, "phrases", or, -exclusions) into FTS5, like Postgres's
    websearch_to_tsquery: `or` separates alternatives, each of which needs all its words."""
    alternatives: list[tuple[list[str], list[str]]] = [([], [])]
    for match in _TOKEN.finditer(text):
        negated, phrase, word = match.group(1), match.group(2), match.group(3)
        if word is not None and word.lower() == "or":
            alternatives.append(([], []))
            continue
        if word is not None and word.startswith("-") and len(word) > 1:
            negated, word = "-", word[1:]
        quoted = _fts5_string(phrase if phrase is not None else word)
        if quoted is not None:
            alternatives[-1][1 if negated else 0].append(quoted)
    alternatives = [alt for alt in alternatives if alt[0] or alt[1]]
    if len(alternatives) == 1 and not alternatives[0][0]:
        # Only exclusions ("-timeout"): FTS5's NOT needs a left side, so the caller subtracts instead.
        return Fts5Query(None, " OR ".join(alternatives[0][1]))
    clauses = []
    for include, exclude in alternatives:
        if not include:
            continue  # an alternative of exclusions only cannot be said in FTS5 next to others; dropped
        clause = " AND ".join(include)
        if exclude:
            clause = f"({clause}) NOT ({' OR '.join(exclude)})"
        clauses.append(f"({clause})")
    return Fts5Query(" OR ".join(clauses) if clauses else None, None)


def has_search_terms(text: str) -> bool:
    """False when a query has nothing to search for (only stop words or punctuation), which Postgres
    would silently turn into "matches nothing"."""
    if not text.strip():
        return False
    if is_postgres():
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT numnode({tsquery_sql('%s')})", [text])
            return cursor.fetchone()[0] > 0
    query = fts5_query(text)
    return bool(query.include or query.exclude)


def filter_matching(trajectories: QuerySet, text: str, *, id_field: str = "pk") -> QuerySet:
    """`trajectories` narrowed to those whose prompt or turns match the full-text query `text`. The rows
    may be trajectories, search rows (matched directly) or rows naming a trajectory in `id_field`."""
    table = TrajectorySearch._meta.db_table
    within = f"{id_field}__in"
    if is_postgres():
        condition = f"document @@ {tsquery_sql('%s')}"
        if trajectories.model is TrajectorySearch:
            return trajectories.filter(RawSQL(f'"{table}".{condition}', [text], output_field=BooleanField()))
        return trajectories.filter(
            **{within: RawSQL(f"SELECT trajectory_id FROM {table} WHERE {condition}", [text])}
        )
    query = fts5_query(text)
    if query.include:
        trajectories = trajectories.filter(
            **{within: RawSQL(f"SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s", [query.include])}
        )
    if query.exclude:
        trajectories = trajectories.filter(
            **{within: RawSQL(f"SELECT trajectory_id FROM {table}", [])}
        ).exclude(
            **{within: RawSQL(f"SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s", [query.exclude])}
        )
    if not (query.include or query.exclude):
        trajectories = trajectories.none()
    return trajectories


def criterion_conditions(
    *, name: str, value: str = "raw", minimum: float | None = None, maximum: float | None = None
) -> dict[str, Any]:
    """Filter arguments on CriterionScore: criterion `name` with its raw (or weighted) value in range."""
    if value not in ("raw", "weighted"):
        raise ValueError(f"value must be 'raw' or 'weighted', not {value!r}")
    conditions: dict[str, Any] = {"name": name}
    if minimum is not None:
        conditions[f"{value}__gte"] = minimum
    if maximum is not None:
        conditions[f"{value}__lte"] = maximum
    return conditions


MAX_DISTINCT_VALUES = 20


def criterion_reward_range(
    *, name: str, value: str = "raw", minimum: float | None = None, maximum: float | None = None
) -> tuple[float, float] | None:
    """The lowest and highest reward among trajectories whose criterion `name` lies in the range, read
    from the (name, value, reward) index one distinct value at a time — or None when the range holds
    more than MAX_DISTINCT_VALUES distinct values (a continuous criterion), or nothing.

    Why: a criterion is usually part of the reward, so sorting a criterion's matches by reward meets
    them clustered at one end; bounding the reward lets the page query start where they are."""
    if value not in ("raw", "weighted"):
        raise ValueError(f"value must be 'raw' or 'weighted', not {value!r}")
    table = CriterionScore._meta.db_table
    low = f"AND {value} >= %s" if minimum is not None else ""
    high = f"AND {value} <= %s" if maximum is not None else ""
    bounds = [b for b in (minimum, maximum) if b is not None]
    # A loose index scan: each step seeks the next distinct value, then the reward range at that value.
    sql = f"""
        WITH RECURSIVE vals(v) AS (
            SELECT (SELECT {value} FROM {table} WHERE name = %s {low} {high} ORDER BY {value} LIMIT 1)
            UNION ALL
            SELECT (SELECT {value} FROM {table} WHERE name = %s AND {value} > vals.v {high} ORDER BY {value} LIMIT 1)
            FROM vals WHERE vals.v IS NOT NULL
        )
        SELECT (SELECT min(reward) FROM {table} WHERE name = %s AND {value} = vals.v),
               (SELECT max(reward) FROM {table} WHERE name = %s AND {value} = vals.v)
        FROM (SELECT v FROM vals WHERE v IS NOT NULL LIMIT {MAX_DISTINCT_VALUES + 1}) AS vals
    """
    params = [name, *bounds, name, *([maximum] if maximum is not None else []), name, name]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if not rows or len(rows) > MAX_DISTINCT_VALUES:
        return None
    return min(r[0] for r in rows), max(r[1] for r in rows)


# --- snippets ---------------------------------------------------------------------------------------

Segment = tuple[str, bool]  # (text, is a match)


def _segments(marked: str) -> list[Segment]:
    segments: list[Segment] = []
    for piece in re.split(f"({MATCH_START}[^{MATCH_END}]*{MATCH_END})", marked):
        if not piece:
            continue
        if piece.startswith(MATCH_START):
            segments.append((piece[1:-1], True))
        else:
            segments.append((re.sub(r"\s+", " ", piece), False))
    return segments


def snippets(trajectory_ids: Sequence[int], text: str) -> dict[int, list[Segment]]:
    """For each trajectory (a page of results), a short excerpt around what `text` matched."""
    if not trajectory_ids or not text.strip():
        return {}
    with connection.cursor() as cursor:
        if is_postgres():
            options = (
                f"StartSel={MATCH_START}, StopSel={MATCH_END}, MaxWords=28, MinWords=10, ShortWord=2, "
                'MaxFragments=2, FragmentDelimiter=" … "'
            )
            cursor.execute(
                f"""
                WITH docs AS (
                    SELECT t.id, left(translate(concat_ws(E'\\n', t.prompt, string_agg(
                               concat_ws(E'\\n', u.text, nullif(u.tool_name, ''), u.tool_args::text, nullif(u.tool_result, '')),
                               E'\\n' ORDER BY u.index)), %s, %s), {MAX_SNIPPET_SOURCE_CHARS}) AS doc
                    FROM {Trajectory._meta.db_table} t
                    LEFT JOIN {Turn._meta.db_table} u ON u.trajectory_id = t.id
                    WHERE t.id = ANY(%s)
                    GROUP BY t.id, t.prompt
                )
                SELECT id, ts_headline('{TEXT_SEARCH_CONFIG}', doc, {tsquery_sql("%s")}, %s)
                FROM docs
                """,
                # "<" becomes TAG_OPEN (so no tag is dropped), the markers and stray TAG_OPENs go.
                ["<" + MATCH_START + MATCH_END + TAG_OPEN, TAG_OPEN, list(trajectory_ids), text, options],
            )
            return {row[0]: _segments((row[1] or "").replace(TAG_OPEN, "<")) for row in cursor.fetchall()}
        else:
            query = fts5_query(text)
            if not query.include:
                return {}
            placeholders = ", ".join(["%s"] * len(trajectory_ids))
            cursor.execute(
                f"SELECT rowid, snippet({FTS_TABLE}, 0, %s, %s, ' … ', 24) FROM {FTS_TABLE} "
                f"WHERE {FTS_TABLE} MATCH %s AND rowid IN ({placeholders})",
                [MATCH_START, MATCH_END, query.include, *trajectory_ids],
            )
        return {row[0]: _segments(row[1] or "") for row in cursor.fetchall()}
