"""The trajectory explorer against known data, stored through the real ingestion path.

Runs on SQLite (FTS5) and on Postgres (tsvector) with the same assertions.
"""

from __future__ import annotations

import pytest
from django.db import models
from django.urls import reverse

from tests.webapp.html_forms import form_data
from webapp.experiments.services import run_create
from webapp.review.explorer import Cursor, ExplorerFilters, explorer_page
from webapp.review.forms import ExplorerForm
from webapp.review.models import Judgement, PreferencePair, PreferenceQueue, Tag, TrajectoryTag
from webapp.rollouts.ingest import ingest_batch
from webapp.rollouts.models import CriterionScore, Trajectory, TrajectorySearch

# (step, group, sample, reward, status, assistant text). `correct` is reward ≥ 1, `format` is 0.5 raw × 0.2.
STORY = [
    (1, 0, 0, 1.0, "ok", "I will call the calculator. The answer is 42."),
    (1, 0, 1, 0.0, "ok", "Bananas are yellow; the answer might be 41."),
    (1, 1, 0, 0.2, "truncated", "Running out of tokens while thinking about prime numbers"),
    (2, 0, 0, 1.2, "ok", "The calculator returned 42 and I trust it."),
    (2, 0, 1, -0.5, "error", "Traceback: timeout error in the tool sandbox"),
    (2, 1, 0, 0.7, "ok", "A quick brown fox answers 17."),
]


def item(group: int, sample: int, reward: float, status: str, text: str, *, task: str = "add") -> dict:
    correct = 1.0 if reward >= 1 else 0.0
    return {
        "group": group,
        "sample": sample,
        "task_id": f"{task}-{group}",
        "split": "train",
        "prompt": f"Task {task}-{group}: what is 40 + 2?",
        "reward": reward,
        "status": status,
        "components": [
            {"name": "correct", "kind": "numeric_match", "raw": correct, "weight": 1.0, "weighted": correct},
            {"name": "format", "kind": "regex", "raw": 0.5, "weight": 0.2, "weighted": 0.1},
        ],
        "turns": [
            {"role": "user", "text": "What is 40 + 2?"},
            {"role": "assistant", "text": text},
        ],
    }


def ingest(run, rows, *, first_seq: int = 1, task: str = "add") -> None:
    by_step: dict[int, list[dict]] = {}
    for step, group, sample, reward, status, text in rows:
        by_step.setdefault(step, []).append(item(group, sample, reward, status, text, task=task))
    events = [
        {"seq": first_seq + i, "type": "trajectories", "step": step, "items": items}
        for i, (step, items) in enumerate(sorted(by_step.items()))
    ]
    ingest_batch(run=run, payload={"events": events})


@pytest.fixture
def story(project, run, environment, rubric, users):
    ingest(run, STORY)
    other_run, _ = run_create(
        project=project,
        name="second run",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    ingest(
        other_run, [(5, 0, 0, 0.9, "ok", "Elsewhere the calculator says 42 in the second run.")], task="mul"
    )
    by_text = {t.turns.get(index=1).text: t for t in Trajectory.objects.all()}
    return {
        "run": run,
        "other_run": other_run,
        "t": {text.split()[1]: traj for text, traj in by_text.items()},
    }


def find(project, **filters) -> list[str]:
    """The assistant texts' second word of the trajectories found, in the page's order."""
    page = explorer_page(project=project, filters=ExplorerFilters(**filters))
    return [row.trajectory.turns.get(index=1).text.split()[1] for row in page.rows]


# --- ingestion keeps the search index ---------------------------------------------------------------


def test_ingestion_writes_a_search_document_and_criterion_scores_per_trajectory(story):
    assert TrajectorySearch.objects.count() == Trajectory.objects.count() == 7
    assert CriterionScore.objects.count() == 14
    assert set(CriterionScore.objects.filter(name="format").values_list("raw", "weighted")) == {(0.5, 0.1)}


# --- filters ----------------------------------------------------------------------------------------


def test_with_no_filters_it_lists_every_trajectory_of_the_project_newest_first(story, project):
    assert find(project) == ["the", "quick", "timeout", "calculator", "out", "are", "will"]


def test_it_filters_by_run_split_step_and_reward(story, project):
    run, other = story["run"], story["other_run"]
    assert find(project, run_ids=(other.pk,)) == ["the"]
    assert len(find(project, run_ids=(run.pk,))) == 6
    assert find(project, split="eval") == []
    assert find(project, step_min=2, step_max=2) == ["quick", "timeout", "calculator"]
    assert find(project, reward_min=0.2, reward_max=1.0) == ["the", "quick", "out", "will"]


def test_it_filters_by_response_length_as_the_run_pages_histogram_links_it(story, project):
    """A click on a response-length bar opens the explorer with length_min/length_max (completion
    tokens); the range combines with text search and criterion filters, which read other tables."""
    lengths = {"the": 12, "quick": 40, "timeout": 41, "calculator": 7, "out": 128, "are": 3, "will": 40}
    for word, tokens in lengths.items():
        Trajectory.objects.filter(pk=story["t"][word].pk).update(completion_tokens=tokens)
    assert find(project, length_min=40, length_max=41) == ["quick", "timeout", "will"]
    assert find(project, length_max=7) == ["calculator", "are"]
    assert find(project, length_min=40, text="answer") == ["quick", "will"]
    assert find(project, length_min=10, criterion="correct", criterion_min=1) == ["will"]
    assert find(project, length_max=10, criterion="correct", criterion_min=1) == ["calculator"]
    form = ExplorerForm({"length_min": "50", "length_max": "10"}, project=project)
    assert not form.is_valid() and "length_max" in form.errors


def test_it_filters_by_status(story, project):
    assert find(project, statuses=("error",)) == ["timeout"]
    assert find(project, statuses=("truncated", "error")) == ["timeout", "out"]


def test_it_filters_by_a_criterion_raw_or_weighted(story, project):
    assert find(project, criterion="correct", criterion_min=1.0) == ["calculator", "will"]
    assert find(project, criterion="correct", criterion_max=0.0) == ["the", "quick", "timeout", "out", "are"]
    assert (
        len(
            find(
                project, criterion="format", criterion_value="weighted", criterion_min=0.1, criterion_max=0.1
            )
        )
        == 7
    )
    assert find(project, criterion="format", criterion_value="raw", criterion_max=0.1) == []
    assert find(project, criterion="no such criterion") == []


def test_it_filters_by_tag(story, project):
    tag = Tag.objects.create(project=project, name="interesting")
    TrajectoryTag.objects.create(trajectory=story["t"]["timeout"], tag=tag)
    assert find(project, tag_id=tag.pk) == ["timeout"]


def test_it_filters_by_annotation_state(story, project, users):
    t = story["t"]
    queue = PreferenceQueue.objects.create(project=project, name="q")
    judged = PreferencePair.objects.create(
        queue=queue, position=0, a=t["will"], b=t["are"], judgement_count=1
    )
    Judgement.objects.create(pair=judged, annotator=users["carol"], choice="a", left_is_a=True)
    PreferencePair.objects.create(queue=queue, position=1, a=t["calculator"], b=t["timeout"])
    assert find(project, annotation="annotated") == ["are", "will"]
    assert find(project, annotation="in_queue") == ["timeout", "calculator", "are", "will"]
    assert find(project, annotation="not_annotated") == ["the", "quick", "timeout", "calculator", "out"]


def test_full_text_finds_words_in_any_turn_with_stemming_phrases_or_and_exclusions(story, project):
    assert find(project, text="banana") == ["are"]  # "Bananas", stemmed
    assert find(project, text="think") == ["out"]  # "thinking"
    assert find(project, text="calculator 42") == ["the", "calculator", "will"]
    assert find(project, text='"calculator returned"') == ["calculator"]
    assert find(project, text="fox or traceback") == ["quick", "timeout"]
    assert find(project, text="calculator -trust") == ["the", "will"]
    assert find(project, text="second run calculator", run_ids=(story["run"].pk,)) == []
    assert find(project, text="zeppelin") == []


def test_the_prompt_is_searched_too(story, project):
    assert find(project, text="mul-0") == ["the"]


def test_filters_combine(story, project):
    assert find(project, text="answer", reward_min=0.5, step_max=1) == ["will"]
    assert find(
        project, text="calculator", criterion="correct", criterion_min=1, run_ids=(story["run"].pk,)
    ) == ["calculator", "will"]


def test_search_finds_text_of_another_project_never(story, project, users, environment, rubric):
    from webapp.projects.services import project_create

    elsewhere = project_create(name="Elsewhere", owner=users["eve"])
    from webapp.experiments.services import environment_create, rubric_create

    env = environment_create(
        project=elsewhere, name="e", kind="arithmetic_calculator", config={}, user=users["eve"]
    )
    rub = rubric_create(
        project=elsewhere,
        name="r",
        spec={
            "aggregation": "weighted_sum",
            "criteria": [{"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}}],
        },
        user=users["eve"],
    )
    their_run, _ = run_create(
        project=elsewhere,
        name="theirs",
        environment=env,
        rubric=rub,
        preset="grpo",
        overrides={},
        user=users["eve"],
        dispatch=False,
    )
    ingest(their_run, [(1, 0, 0, 1.0, "ok", "A zeppelin answers 42.")])
    assert find(project, text="zeppelin") == []
    assert find(elsewhere, text="zeppelin") == ["zeppelin"]
    form = ExplorerForm({"run": [str(their_run.pk)]}, project=project)
    assert not form.is_valid() and "run" in form.errors


def test_sorts(story, project):
    assert find(project, sort="reward_desc") == [
        "calculator",
        "will",
        "the",
        "quick",
        "out",
        "are",
        "timeout",
    ]
    assert find(project, sort="reward_asc")[:2] == ["timeout", "are"]
    assert find(project, sort="step_desc")[0] == "the"  # step 5, in the second run
    assert find(project, sort="step_asc")[-1] == "the"
    assert find(project, sort="oldest") == list(reversed(find(project)))


def test_snippets_mark_what_matched(story, project):
    page = explorer_page(project=project, filters=ExplorerFilters(text="bananas"))
    (row,) = page.rows
    assert any(match and text.lower().startswith("banana") for text, match in row.snippet)
    assert "yellow" in "".join(text for text, _ in row.snippet)


def test_a_query_of_only_stop_words_says_so(story, project, settings):
    page = explorer_page(project=project, filters=ExplorerFilters(text="+++"))
    assert page.rows == [] and "not indexed" in page.notice


# --- the form ---------------------------------------------------------------------------------------


def test_the_form_rejects_inverted_ranges_and_a_range_without_a_criterion(story, project):
    form = ExplorerForm({"reward_min": "1", "reward_max": "0", "criterion_min": "0.5"}, project=project)
    assert not form.is_valid()
    assert "reward_max" in form.errors and "criterion" in form.errors


def test_the_form_rejects_non_finite_numbers_and_unknown_choices(story, project):
    form = ExplorerForm(
        {"reward_min": "nan", "step_min": "-1", "sort": "random", "page_size": "1000000"}, project=project
    )
    assert not form.is_valid()
    assert {"reward_min", "step_min", "sort", "page_size"} <= set(form.errors)


# --- the page -----------------------------------------------------------------------------------------


def test_the_page_renders_rows_with_links_to_the_trajectory_and_its_group(story, project, client_for):
    client = client_for("dave")
    url = reverse("review:explorer", args=[project.slug])
    response = client.get(url, {"q": "timeout"})
    assert response.status_code == 200
    html = response.content.decode()
    t = story["t"]["timeout"]
    assert f'href="/p/{project.slug}/trajectories/{t.pk}/"' in html
    assert f'href="/p/{project.slug}/runs/{t.run_id}/groups/2/0/?split=train"' in html
    assert "<mark>timeout</mark>" in html
    assert 'data-trajectory="' in html and html.count('data-trajectory="') == 1


def test_the_filter_form_round_trips_through_the_query_string(story, project, client_for):
    client = client_for("dave")
    url = reverse("review:explorer", args=[project.slug])
    query = {
        "q": "calculator",
        "status": ["ok"],
        "reward_min": "0.5",
        "sort": "reward_desc",
        "page_size": "25",
        "run": [str(story["run"].pk)],
        "criterion": "correct",
        "criterion_min": "1",
    }
    html = client.get(url, query).content.decode()
    submitted = form_data(html, "explorer-form")
    assert (
        submitted["q"] == ["calculator"]
        and submitted["status"] == ["ok"]
        and submitted["sort"] == ["reward_desc"]
    )
    assert submitted["run"] == [str(story["run"].pk)] and submitted["criterion_min"] == ["1"]
    again = client.get(url, submitted).content.decode()
    assert again.count('data-trajectory="') == 2


def test_htmx_gets_only_the_results_and_a_clean_address(story, project, client_for):
    client = client_for("dave")
    url = reverse("review:explorer", args=[project.slug])
    response = client.get(
        url, {"q": "fox", "split": "", "tag": ""}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="explorer-results"
    )
    html = response.content.decode()
    assert "<html" not in html and 'id="explorer-form"' not in html
    assert html.count('data-trajectory="') == 1
    assert response["HX-Push-Url"] == f"{url}?q=fox"


def test_invalid_filters_show_errors_not_a_500(story, project, client_for):
    response = client_for("dave").get(reverse("review:explorer", args=[project.slug]), {"reward_min": "abc"})
    assert response.status_code == 200
    assert "Reward from: Enter a number." in response.content.decode()


def test_a_foreign_or_forged_cursor_falls_back_to_the_first_page(story, project, client_for):
    client = client_for("dave")
    url = reverse("review:explorer", args=[project.slug])
    other_sort = Cursor("reward_desc", False, 0.5, 3).encode()
    for cursor in (other_sort, "not-a-cursor", "W10", "eyJ4Ijox"):
        response = client.get(url, {"cursor": cursor})
        assert response.status_code == 200
        html = response.content.decode()
        assert "Showing the first page." in html and html.count('data-trajectory="') == 7


def test_a_criterion_range_bounds_the_reward_of_its_matches(story):
    from webapp.rollouts.search import MAX_DISTINCT_VALUES, criterion_reward_range

    assert criterion_reward_range(name="correct", minimum=1) == (1.0, 1.2)
    assert criterion_reward_range(name="correct", maximum=0) == (-0.5, 0.9)
    assert criterion_reward_range(name="format", value="weighted", minimum=0.1, maximum=0.1) == (-0.5, 1.2)
    assert criterion_reward_range(name="correct", minimum=5) is None
    assert criterion_reward_range(name="no such criterion") is None
    # A criterion with many distinct values in the range is not worth bounding this way.
    ingest(
        story["run"],
        [(9, 0, i, i / 100, "ok", f"Sample {i}") for i in range(MAX_DISTINCT_VALUES + 1)],
        first_seq=50,
    )
    from webapp.rollouts.models import CriterionScore

    CriterionScore.objects.filter(step=9, name="format").update(raw=models.F("reward"))
    assert criterion_reward_range(name="format", minimum=0, maximum=0.5) is None


def test_reward_sorted_criterion_pages_are_exact(story, project):
    """The reward bound read from the criterion index changes where the scan starts, never the rows."""
    assert find(project, criterion="correct", criterion_min=1, sort="reward_asc") == ["will", "calculator"]
    assert find(project, criterion="correct", criterion_max=0, sort="reward_desc") == [
        "the",
        "quick",
        "out",
        "are",
        "timeout",
    ]


def test_annotation_state_follows_the_review_services(story, project, users):
    """End to end through webapp.review: a queue built from the run's groups, one pair judged by carol."""
    from webapp.review.services import judgement_submit, next_pair, queue_create

    queue = queue_create(
        project=project,
        user=users["alice"],
        name="siblings",
        runs=[story["run"]],
        annotators=[users["carol"]],
    )
    assignment = next_pair(queue=queue, annotator=users["carol"])
    judgement_submit(pair=assignment.pair, annotator=users["carol"], choice="a")

    def ids(**filters) -> set[int]:
        return {
            row.trajectory.pk
            for row in explorer_page(project=project, filters=ExplorerFilters(**filters)).rows
        }

    queued = {pk for pair in PreferencePair.objects.filter(queue=queue) for pk in (pair.a_id, pair.b_id)}
    judged = {assignment.pair.a_id, assignment.pair.b_id}
    assert judged <= queued
    assert ids(annotation="annotated") == judged
    assert ids(annotation="in_queue") == queued
    assert ids(annotation="not_annotated") == set(Trajectory.objects.values_list("pk", flat=True)) - judged
