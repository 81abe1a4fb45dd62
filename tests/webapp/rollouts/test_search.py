"""Full-text search and its index: the FTS5 translation (SQLite), documents, reindexing, cascades and
hostile queries — on whichever database the suite runs (SQLite, or Postgres with DATABASE_URL)."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.webapp.review.test_explorer import ingest
from webapp.review.explorer import ExplorerFilters, explorer_page
from webapp.rollouts.models import CriterionScore, Trajectory, TrajectorySearch, Turn
from webapp.rollouts.search import (
    FTS_TABLE,
    MATCH_START,
    MAX_DOCUMENT_CHARS,
    Fts5Query,
    document_text,
    filter_matching,
    fts5_query,
    reindex_trajectories,
)


def found(text: str) -> list[int]:
    return sorted(filter_matching(Trajectory.objects.all(), text).values_list("pk", flat=True))


# --- the FTS5 translation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query, expected",
    [
        ("timeout", Fts5Query('("timeout")', None)),
        ("tool timeout", Fts5Query('("tool" AND "timeout")', None)),
        ('"tool call" failed', Fts5Query('("tool call" AND "failed")', None)),
        ("fox or dog cat", Fts5Query('("fox") OR ("dog" AND "cat")', None)),
        ("calculator -trust", Fts5Query('(("calculator") NOT ("trust"))', None)),
        ('answer -"carry the one"', Fts5Query('(("answer") NOT ("carry the one"))', None)),
        ("-timeout", Fts5Query(None, '"timeout"')),
        ("+++ ---", Fts5Query(None, None)),
        (
            'a" OR b NEAR(c) d* ^e document:f',
            Fts5Query('("a""") OR ("b" AND "NEAR(c)" AND "d*" AND "^e" AND "document:f")', None),
        ),
        ('"unterminated phrase', Fts5Query('("unterminated phrase")', None)),
    ],
)
def test_the_websearch_syntax_becomes_fts5_with_every_word_quoted(query, expected):
    assert fts5_query(query) == expected


# --- documents --------------------------------------------------------------------------------------------


def test_a_document_holds_prompt_text_tool_calls_and_results_and_is_capped():
    text = document_text(
        "What is 2+3?",
        [
            {
                "role": "assistant",
                "text": "Calling",
                "tool_name": "calculator",
                "tool_args": {"expression": "2+3"},
            },
            {"role": "tool", "text": "", "tool_result": "5"},
        ],
    )
    assert text.split("\n") == ["What is 2+3?", "Calling", "calculator", '{"expression": "2+3"}', "5"]
    assert len(document_text("x" * (MAX_DOCUMENT_CHARS * 2), [])) == MAX_DOCUMENT_CHARS
    assert MATCH_START not in document_text(f"a{MATCH_START}b\x00c", [])


def test_a_huge_trajectory_of_distinct_words_ingests_and_is_found(run):
    """2,000,000 characters of distinct words: the capped document still fits Postgres's tsvector."""
    words = " ".join(f"w{i}x" for i in range(200_000))
    item = {
        "group": 0,
        "sample": 0,
        "task_id": "big",
        "prompt": "needle at the start",
        "reward": 0.0,
        "turns": [
            {"role": "assistant", "text": words[i : i + 190_000]} for i in range(0, len(words), 190_000)
        ],
    }
    from webapp.rollouts.ingest import ingest_batch

    ingest_batch(
        run=run, payload={"events": [{"seq": 1, "type": "trajectories", "step": 0, "items": [item]}]}
    )
    assert len(found("needle")) == 1 and len(found("w7x")) == 1
    assert found("w199999x") == []  # past the cap


# --- reindexing and consistency ----------------------------------------------------------------------------


def test_trajectories_written_without_ingestion_are_found_after_a_reindex(run):
    trajectory = Trajectory.objects.create(
        run=run,
        step=1,
        task_id="t",
        prompt="Prompt about seals",
        reward=1.0,
        components=[{"name": "correct", "raw": 1, "weight": 1, "weighted": 1}],
    )
    Turn.objects.create(trajectory=trajectory, index=0, role="assistant", text="Penguins everywhere")
    assert found("seal") == []
    assert reindex_trajectories(Trajectory.objects.filter(pk=trajectory.pk)) == 1
    assert found("seal") == found("penguin") == [trajectory.pk]
    assert CriterionScore.objects.filter(trajectory=trajectory).count() == 1

    Turn.objects.filter(trajectory=trajectory).update(text="Now about otters")
    reindex_trajectories()
    assert found("penguin") == [] and found("otter") == [trajectory.pk]
    assert CriterionScore.objects.filter(trajectory=trajectory).count() == 1  # replaced, not added
    assert TrajectorySearch.objects.count() == 1


def test_deleting_a_run_takes_its_documents_and_scores_with_it(run):
    ingest(run, [(1, 0, 0, 1.0, "ok", "Albatross sighting"), (1, 0, 1, 0.0, "ok", "Nothing here")])
    assert len(found("albatross")) == 1
    run.delete()
    assert TrajectorySearch.objects.count() == CriterionScore.objects.count() == 0
    assert found("albatross") == []
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:  # the FTS5 index followed the deletes (raises if not)
            cursor.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rank) VALUES ('integrity-check', 1)")


# --- hostile and odd queries -------------------------------------------------------------------------------

ODD_QUERIES = [
    '"',
    '""',
    "'",
    "(",
    ")",
    "*",
    "-",
    "--",
    "or",
    "OR OR",
    "-or",
    "NEAR",
    "AND",
    "NOT",
    "a:b",
    "^x",
    "x*",
    "'; DROP TABLE rollouts_trajectory; --",
    "%",
    "_",
    "\\",
    "日本語",
    "emoji 🎉",
    "a" * 500,
    "<script>",
    "\t\n",
    "!!!",
    "& | ! <->",
    "x <-> y",
    "a:*",
    "a & b",
    "(a | b) & !c",
]


@pytest.mark.parametrize("query", ODD_QUERIES)
def test_no_query_text_breaks_the_search(run, project, query):
    ingest(run, [(1, 0, 0, 1.0, "ok", "An ordinary answer about a table")])
    page = explorer_page(project=project, filters=ExplorerFilters(text=query))
    assert isinstance(page.rows, list)
    assert Trajectory.objects.count() == 1  # and nothing was dropped


def test_only_exclusions_finds_the_documents_without_the_word(run):
    ingest(run, [(1, 0, 0, 1.0, "ok", "Has the kiwi"), (1, 0, 1, 0.0, "ok", "Has no fruit")])
    (without,) = found("-kiwi")
    assert "fruit" in Trajectory.objects.get(pk=without).turns.get(index=1).text


def test_the_sqlite_full_text_index_is_kept_in_sync_by_its_triggers(db):
    """Django rebuilds a SQLite table to alter it, dropping its triggers; a migration that alters the
    search table must make them again (0004, 0009 do)."""
    if connection.vendor != "sqlite":
        pytest.skip("Postgres keeps the tsvector in the table itself")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'rollouts_trajectorysearch'"
        )
        assert {row[0] for row in cursor.fetchall()} == {
            f"rollouts_trajectorysearch_{t}" for t in ("ai", "ad", "au")
        }


def test_words_in_angle_brackets_are_searchable_and_shown(run, project):
    """Agent transcripts are full of <tool_call>, <answer>, <think>: Postgres's parser would take them
    for HTML tags and drop them, from the index and from excerpts."""
    ingest(
        run, [(1, 0, 0, 1.0, "ok", "Final: <answer>42</answer> after <think>musing</think> a <tool_call>")]
    )
    assert len(found("tool_call")) == 1 and len(found("think")) == 1 and len(found("<answer>")) == 1
    (row,) = explorer_page(project=project, filters=ExplorerFilters(text="musing")).rows
    excerpt = "".join(text for text, _ in row.snippet)
    assert "<answer>42</answer>" in excerpt and "<think>" in excerpt
