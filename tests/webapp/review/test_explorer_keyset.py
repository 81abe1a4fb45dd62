"""Keyset pagination: every sort walks the whole result once, forwards and backwards, and stays exact
while trajectories keep arriving between page loads."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.review.test_explorer import ingest
from webapp.review.explorer import SORTS, ExplorerFilters, explorer_page
from webapp.rollouts.models import Trajectory

PAGE = 25


def rows(count: int, *, step_base: int = 0, seed: int = 0, group_base: int = 0) -> list[tuple]:
    # Rewards repeat (many ties) and steps repeat: the id must break ties for pages to be exact.
    return [
        (
            step_base + (i * 7 + seed) % 5,
            group_base + i // 8,
            i % 8,
            ((i * 3 + seed) % 4) / 4,
            "ok",
            f"answer number {i}",
        )
        for i in range(count)
    ]


@pytest.fixture
def many(run):
    ingest(run, rows(120))
    return run


def expected_order(sort_name: str) -> list[int]:
    sort = SORTS[sort_name]
    sign = "-" if sort.descending else ""
    order = [f"{sign}{sort.key}", f"{sign}id"] if sort.key else [f"{sign}id"]
    return list(Trajectory.objects.order_by(*order).values_list("pk", flat=True))


def walk(project, filters: ExplorerFilters, *, between=None) -> tuple[list[list[int]], list[str]]:
    pages, cursors, cursor = [], [], None
    while True:
        page = explorer_page(project=project, filters=filters, cursor=cursor)
        pages.append([row.trajectory.pk for row in page.rows])
        cursors.append(page.previous_cursor)
        if page.next_cursor is None:
            return pages, cursors
        if between is not None:
            between(len(pages))
        cursor = page.next_cursor


# Each finds every row, from a different table: trajectories, the search table, the criterion scores.
SOURCES = {
    "no filter": {},
    "text": {"text": "answer"},
    "criterion": {"criterion": "format", "criterion_min": 0.5},
}


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("sort", list(SORTS))
def test_every_sort_walks_all_rows_once_forwards_and_back(many, project, sort, source):
    filters = ExplorerFilters(sort=sort, page_size=PAGE, **SOURCES[source])
    pages, previous = walk(project, filters)
    assert [len(p) for p in pages] == [25, 25, 25, 25, 20]
    assert [pk for page in pages for pk in page] == expected_order(sort)
    assert previous[0] is None and all(previous[1:])
    # Back from the last page, each previous cursor gives exactly the page before.
    cursor = previous[-1]
    for index in range(len(pages) - 2, -1, -1):
        page = explorer_page(project=project, filters=filters, cursor=cursor)
        assert [row.trajectory.pk for row in page.rows] == pages[index]
        cursor = page.previous_cursor
    assert cursor is None  # the first page has no previous page


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("sort", ["newest", "reward_desc", "reward_asc", "step_asc"])
def test_rows_arriving_between_page_loads_cause_no_duplicates_or_gaps(many, project, run, sort, source):
    before = set(Trajectory.objects.values_list("pk", flat=True))
    batches = iter(range(1, 100))

    def insert_more(_pages_seen: int) -> None:
        # New trajectories with rewards and steps on both sides of (and equal to) the rows already seen.
        n = next(batches)
        ingest(run, rows(12, step_base=0, seed=n, group_base=100 * (n + 1)), first_seq=1000 + n)

    pages, _ = walk(
        project, ExplorerFilters(sort=sort, page_size=PAGE, **SOURCES[source]), between=insert_more
    )
    seen = [pk for page in pages for pk in page]
    assert len(seen) == len(set(seen)), "a trajectory appeared on two pages"
    assert before <= set(seen), "a trajectory that existed before the walk was skipped"
    if sort == "newest":
        assert set(seen) == before  # newer rows land before page 1, never inside the walk


def test_the_api_follows_its_next_links_to_the_end(many, project, client_for):
    client = client_for("dave")
    url = reverse("api:trajectories", args=[project.slug]) + "?sort=reward_asc&page_size=25"
    seen = []
    while url:
        body = client.get(url).json()
        seen.extend(row["id"] for row in body["results"])
        url = body["next"]
    assert seen == expected_order("reward_asc")


@pytest.mark.parametrize("source", list(SOURCES))
def test_filters_and_cursors_compose(many, project, source):
    filters = ExplorerFilters(
        sort="reward_desc", page_size=PAGE, reward_min=0.5, step_max=3, **SOURCES[source]
    )
    pages, _ = walk(project, filters)
    found = [pk for page in pages for pk in page]
    expected = Trajectory.objects.filter(reward__gte=0.5, step__lte=3).order_by("-reward", "-id")
    assert found == list(expected.values_list("pk", flat=True))
