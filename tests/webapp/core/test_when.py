"""{% when %}: every page renders a time as <time datetime> in UTC, named as such, which static/js/when.js
rewrites in the reader's zone; a relative time carries its exact time for the hover."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.template import Context, Template, TemplateSyntaxError
from django.utils import timezone


def render(source: str, **context) -> str:
    return Template(source).render(Context(context))


def test_an_exact_time_is_utc_named_and_machine_readable():
    moment = datetime(2026, 11, 29, 5, 15, 46, tzinfo=UTC)
    html = render('{% when moment "exact" %}', moment=moment)
    assert html == (
        '<time datetime="2026-11-29T05:15:46Z" data-when="exact" title="2026-11-29 05:15:46 UTC">'
        "2026-11-29 05:15 UTC</time>"
    )
    assert ">05:15 UTC<" in render('{% when moment "time" %}', moment=moment)
    # a run's clock (started, finished, last heartbeat) keeps its seconds
    assert 'data-when="seconds"' in render('{% when moment "seconds" %}', moment=moment)
    assert ">2026-11-29 05:15:46 UTC<" in render('{% when moment "seconds" %}', moment=moment)


def test_a_relative_time_says_how_long_ago_or_until_and_keeps_the_exact_one():
    past = render("{% when moment %}", moment=timezone.now() - timedelta(minutes=5))
    assert 'data-when="relative"' in past and ">5\xa0minutes ago<" in past and "UTC" in past
    future = render("{% when moment %}", moment=timezone.now() + timedelta(minutes=14, seconds=30))
    assert ">in 14\xa0minutes<" in future


def test_no_time_is_a_dash_and_an_unknown_style_is_an_error():
    assert render("{% when moment %}", moment=None) == "—"
    with pytest.raises(TemplateSyntaxError, match="style is one of"):
        render('{% when moment "soon" %}', moment=timezone.now())
