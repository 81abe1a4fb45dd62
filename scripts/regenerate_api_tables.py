"""Rewrite docs/api.md's generated tables — the limits table (from the OpenAPI document) and the wire
tables (from trainers/sdk/wire.py) — after a change to either. tests/webapp/api/test_docs.py checks them."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

import django  # noqa: E402

django.setup()

from tests.webapp.api.openapi import DOCUMENT  # noqa: E402
from trainers.sdk import wire, wire_docs  # noqa: E402
from webapp.api.schema import limits_markdown  # noqa: E402


def main() -> None:
    path = ROOT / "docs" / "api.md"
    text = path.read_text()
    blocks = {"limits": limits_markdown(DOCUMENT)}
    shapes = {
        "event": wire.EVENT,
        "trajectory": wire.TRAJECTORY,
        "turn": wire.TURN,
        "component": wire.COMPONENT,
    }
    shapes.update({kind: shape for kind, shape in wire.EVENTS.items() if shape.fields})
    blocks.update({f"wire:{name}": wire_docs.markdown_table(shape) for name, shape in shapes.items()})
    for name, table in blocks.items():
        pattern = rf"(<!-- {re.escape(name)} -->\n).*?(\n?<!-- /{re.escape(name)} -->)"
        if not re.search(pattern, text, re.S):
            print(f"docs/api.md has no <!-- {name} --> block: add one where the table belongs")
            continue
        text = re.sub(
            pattern, lambda m, t=table: m.group(1) + t + "\n" + m.group(2).lstrip("\n"), text, flags=re.S
        )
    path.write_text(text)
    print(f"rewrote {len(blocks)} tables in {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
