"""Every answer carries the Content-Security-Policy (scripts from our origin only), pages that show a
secret are never cached, and no template holds inline script the policy would refuse."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from webapp.core.security import DEFAULT_POLICY, policy_header

TEMPLATES = Path(__file__).resolve().parents[3] / "templates"


@pytest.mark.parametrize(
    "path", ["/accounts/login/", "/api/projects/", "/api/no-such/", "/healthz", "/api/docs/"]
)
def test_every_answer_carries_the_policy(client, db, path):
    response = client.get(path)
    assert response["Content-Security-Policy"] == policy_header(DEFAULT_POLICY)
    assert "script-src 'self';" in response["Content-Security-Policy"]


def test_pages_carry_the_policy(client_for, project):
    for path in ["/", f"/p/{project.slug}/", f"/p/{project.slug}/runs/", "/accounts/tokens/"]:
        assert "script-src 'self'" in client_for("alice").get(path)["Content-Security-Policy"], path


def test_the_tokens_page_is_never_cached(client_for, users):
    client = client_for("bob")
    created = client.post("/accounts/tokens/", {"name": "laptop"})
    page = client.get(created["Location"])
    assert "rsu_" in page.content.decode()
    assert "no-store" in page["Cache-Control"]


def test_no_template_holds_inline_script_or_handlers():
    offenders = []
    for template in TEMPLATES.rglob("*.html"):
        text = template.read_text()
        for pattern in (r"<script(?![^>]*\bsrc=)[^>]*>", r"\son[a-z]+\s*=", r"javascript:"):
            if re.search(pattern, text):
                offenders.append(f"{template.relative_to(TEMPLATES)}: {pattern}")
    assert offenders == []
