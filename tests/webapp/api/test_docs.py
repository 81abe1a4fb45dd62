"""docs/api.md and the code agree: the limits table is the one the OpenAPI document gives, and the
ingestion tables are the wire format's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.webapp.api.openapi import DOCUMENT
from trainers.sdk import wire, wire_docs
from webapp.api.schema import limits_markdown

API_MD = Path(__file__).resolve().parents[3] / "docs" / "api.md"


def section(name: str) -> str:
    match = re.search(
        rf"<!-- {re.escape(name)} -->\n(.*?)\n?<!-- /{re.escape(name)} -->", API_MD.read_text(), re.S
    )
    assert match, f"docs/api.md has no <!-- {name} --> block"
    return match.group(1).strip()


def test_the_limits_table_is_the_schemas():
    expected = limits_markdown(DOCUMENT)
    assert section("limits") == expected, (
        "docs/api.md's limits table differs from /api/schema/; paste this between <!-- limits --> and "
        f"<!-- /limits -->:\n{expected}"
    )


@pytest.mark.parametrize(
    "name, shape",
    [
        ("event", wire.EVENT),
        ("trajectory", wire.TRAJECTORY),
        ("turn", wire.TURN),
        ("token_stats_record", wire.TOKEN_STATS),
        ("turn_token_stats", wire.TURN_TOKEN_STATS),
        ("component", wire.COMPONENT),
        *[(kind, shape) for kind, shape in wire.EVENTS.items() if shape.fields],
    ],
)
def test_the_ingestion_tables_are_the_wire_formats(name, shape):
    assert section(f"wire:{name}") == wire_docs.markdown_table(shape)


def test_the_schema_publishes_the_wire_format_as_the_ingestion_body():
    operation = DOCUMENT["paths"]["/api/runs/{run_id}/events"]["post"]
    assert operation["requestBody"]["content"]["application/json"]["schema"] == wire_docs.json_schema()


@pytest.mark.parametrize(
    "path, field, words",
    [
        ("/api/projects/{slug}/runs/", "name", "string, 1 – 120 characters"),
        ("/api/tokens/", "name", "string, 1 – 80 characters"),
        ("/api/projects/{slug}/external-runs/", "max_steps", "integer, 0 – 2,147,483,647"),
        ("/api/projects/{slug}/environments/", "description", "string, 0 – 10,000 characters"),
    ],
)
def test_the_documented_limits_are_the_ones_enforced(path, field, words):
    """A few rows read back against what the API does at the limit and one past it."""
    row = f"| `POST {path}` | `{field}` | body |"
    assert any(
        line.startswith(row) and line.endswith(f"| {words} |") for line in section("limits").splitlines()
    )


def test_the_step_phases_an_external_trainer_reports_are_named():
    """The async-health panel stacks wire.STEP_TIME_PARTS: an SDK user learns the metric names here."""
    text = API_MD.read_text()
    for parts in wire.STEP_TIME_PARTS.values():
        for part in parts:
            assert f"`time/{part}`" in text, part
