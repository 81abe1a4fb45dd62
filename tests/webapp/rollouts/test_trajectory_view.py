"""The trajectory page: turns with roles, tool-call cards, per-turn rewards, the reward breakdown,
token counts and the loss mask, lazy windows of turns, the JSON download — and who may open each of
the reading pages (groups, trajectories, diffs and their entry points)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest
from django.urls import reverse

from tests.webapp.factories import HOSTILE_TEXTS, long_turns, make_trajectory, turn
from webapp.rollouts.views_trajectories import FIRST_TURNS, TURNS_PER_CHUNK

COMPONENTS = [
    {
        "name": "correct",
        "kind": "numeric_match",
        "raw": 1.0,
        "weight": 1.0,
        "weighted": 1.0,
        "explanation": "",
    },
    {"name": "format", "kind": "regex", "raw": 1.0, "weight": 0.2, "weighted": 0.2},
    {
        "name": "judge",
        "kind": "llm_judge",
        "raw": 0.5,
        "weight": 0.4,
        "weighted": 0.2,
        "explanation": "Correct, but the reasoning skips a step.",
    },
]


def page_url(project, name: str, *args, query: str = "") -> str:
    return reverse(f"rollouts:{name}", args=[project.slug, *args]) + query


@pytest.fixture
def solved(run):
    return make_trajectory(
        run,
        step=3,
        group=1,
        sample=2,
        task_id="add-12-30",
        reward=1.4,
        advantage=0.71,
        components=COMPONENTS,
        rubric_version=1,
        prompt_tokens=57,
        completion_tokens=31,
        env_state={"display": "42"},
        policy_version=1,
        staleness=2,
        turns=[
            turn("system", "You are a careful calculator.", token_ids=[1, 2, 3], loss_mask=[0, 0, 0]),
            turn("user", "What is 12 + 30?", token_ids=[4, 5], loss_mask=[0, 0]),
            turn(
                "assistant",
                "Let me use the tool.",
                tool_name="calculator",
                tool_args={"expression": "12 + 30"},
                token_ids=[6, 7, 8, 9],
                loss_mask=[1, 1, 1, 1],
            ),
            turn("tool", "", tool_name="calculator", tool_result="42", token_ids=[10, 11], loss_mask=[0, 0]),
            turn(
                "assistant",
                "<answer>42</answer>",
                reward=0.25,
                token_ids=[12, 13, 14, 15, 16],
                loss_mask=[1, 1, 0, 0, 1],
            ),
        ],
    )


def test_the_page_shows_every_turn_with_its_role_tool_card_reward_and_tokens(client_for, project, solved):
    response = client_for("dave").get(page_url(project, "trajectory_detail", solved.pk))

    assert response.status_code == 200
    html = response.content.decode()
    turns = re.findall(r'<li class="turn role-(\w+)( masked)?" id="turn-(\d+)"', html)
    assert [(role, bool(masked), int(index)) for role, masked, index in turns] == [
        ("system", True, 0),
        ("user", True, 1),
        ("assistant", False, 2),
        ("tool", True, 3),
        ("assistant", False, 4),
    ]
    assert "<code>calculator</code>" in html
    assert "&quot;expression&quot;: &quot;12 + 30&quot;" in html  # arguments pretty-printed, escaped
    assert "<pre>42</pre>" in html  # the tool's result
    assert "reward <strong>0.2500</strong>" in html  # the last turn's own reward
    assert "5 tokens: 3 trained, 2 masked" in html
    assert (
        html.count('class="m"') == 1 + 1 + 1 + 1
    )  # one masked segment in each of four turns… and the last's
    assert "first run" in html and "correctness v1" in html and "scored with v1" in html
    assert "policy v1, 2 versions stale" in html  # sampled two updates before the learner trained on it


def test_the_reward_breakdown_lists_raw_weight_weighted_and_the_judges_explanation(
    client_for, project, solved
):
    html = client_for("dave").get(page_url(project, "trajectory_detail", solved.pk)).content.decode()
    rows = re.findall(
        r"<tr>\s*<td>(\w+) <span class=\"muted small\">\w+</span></td>\s*"
        r"<td class=\"num\">([\d.]+)</td>\s*<td class=\"num\">([\d.]+)</td>\s*<td class=\"num\">([\d.]+)</td>",
        html,
    )
    assert rows == [
        ("correct", "1.0000", "1.000", "1.0000"),
        ("format", "1.0000", "0.200", "0.2000"),
        ("judge", "0.5000", "0.400", "0.2000"),
    ]
    assert "Correct, but the reasoning skips a step." in html
    assert "<strong>1.4000</strong>" in html
    assert "is not the sum" not in html  # 1.0 + 0.2 + 0.2 is the stored reward: no warning


def test_a_total_that_ignores_the_weights_is_pointed_out(client_for, project, run):
    trajectory = make_trajectory(run, reward=2.0, components=COMPONENTS)
    html = client_for("dave").get(page_url(project, "trajectory_detail", trajectory.pk)).content.decode()
    assert "the stored reward is not the sum of the weighted components" in html


def test_a_long_trajectory_sends_its_first_turns_and_fetches_the_rest_in_windows(client_for, project, run):
    trajectory = make_trajectory(run, turns=long_turns(300))
    client = client_for("dave")

    first = client.get(page_url(project, "trajectory_detail", trajectory.pk)).content.decode()
    seen = [int(i) for i in re.findall(r'id="turn-(\d+)"', first)]
    assert seen == list(range(FIRST_TURNS))
    windows = 0
    next_url = re.search(r'hx-get="([^"]+)"', first).group(1).replace("&amp;", "&")
    while next_url:
        chunk = client.get(next_url)
        assert chunk.status_code == 200
        body = chunk.content.decode()
        assert "<html" not in body  # a fragment, not a page
        seen += [int(i) for i in re.findall(r'id="turn-(\d+)"', body)]
        windows += 1
        found = re.search(r'hx-get="([^"]+)"', body)
        next_url = found.group(1).replace("&amp;", "&") if found else None
    assert seen == list(range(300))
    assert windows == -(-(300 - FIRST_TURNS) // TURNS_PER_CHUNK)


def test_a_short_trajectory_has_no_pending_window(client_for, project, solved):
    html = client_for("dave").get(page_url(project, "trajectory_detail", solved.pk)).content.decode()
    assert "data-turns-more" not in html and "data-load-all-turns" not in html


def test_the_turn_window_needs_a_start(client_for, project, solved):
    client = client_for("dave")
    assert client.get(page_url(project, "trajectory_turns", solved.pk)).status_code == 400
    assert client.get(page_url(project, "trajectory_turns", solved.pk, query="?start=x")).status_code == 400
    assert client.get(page_url(project, "trajectory_turns", solved.pk, query="?start=999")).status_code == 200


def test_the_json_download_is_the_whole_trajectory_as_an_attachment(client_for, project, solved):
    response = client_for("dave").get(page_url(project, "trajectory_json", solved.pk))

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == f'attachment; filename="trajectory-{solved.pk}.json"'
    assert response["X-Content-Type-Options"] == "nosniff"
    data = json.loads(response.content)
    assert data["reward"] == 1.4 and data["advantage"] == 0.71 and data["components"] == COMPONENTS
    assert data["run"]["rubric"] == {"name": "correctness", "version": 1}
    assert [t["role"] for t in data["turns"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert data["turns"][2]["tool_args"] == {"expression": "12 + 30"}
    assert data["turns"][4]["loss_mask"] == [1, 1, 0, 0, 1]
    assert data["env_state"] == {"display": "42"}


@pytest.mark.parametrize("hostile", HOSTILE_TEXTS)
def test_hostile_model_output_is_inert_on_the_page_and_in_the_download(client_for, project, run, hostile):
    trajectory = make_trajectory(
        run,
        task_id=hostile,
        prompt=hostile,
        env_state={"note": hostile},
        components=[
            {
                "name": hostile,
                "kind": "llm_judge",
                "raw": 0,
                "weight": 1,
                "weighted": 0,
                "explanation": hostile,
            }
        ],
        turns=[
            turn("user", hostile),
            turn("assistant", hostile, tool_name="calculator", tool_args={"x": hostile}, tool_result=hostile),
            turn("tool", hostile, tool_result=hostile),
        ],
    )
    client = client_for("dave")
    for url in (
        page_url(project, "trajectory_detail", trajectory.pk),
        page_url(project, "trajectory_turns", trajectory.pk, query="?start=0"),
    ):
        html = client.get(url).content.decode()
        assert "<script>window.pwned" not in html
        assert "<img src=x" not in html
        assert 'href="javascript:' not in html
        assert "&lt;script&gt;" in html or "&lt;img" in html or "[click me](javascript:alert(1))" in html

    download = client.get(page_url(project, "trajectory_json", trajectory.pk))
    assert download["Content-Type"] == "application/json"
    assert download["Content-Disposition"].startswith("attachment;")
    assert json.loads(download.content)["turns"][0]["text"] == hostile  # kept verbatim as data


# --- who may open what ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    name: str
    args: tuple[str, ...]  # names of objects (or literal ints) in the world, after the slug
    query: str = ""
    ok: int = 200


@pytest.fixture
def world(project, run, users, environment, rubric):
    from webapp.experiments.services import run_create

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
    best = make_trajectory(run, step=1, group=0, sample=0, reward=1.0)
    worst = make_trajectory(run, step=1, group=0, sample=1, reward=0.0)
    early = make_trajectory(run, step=0, split="eval", task_id="eval-1", reward=0.0)
    late = make_trajectory(run, step=2, split="eval", task_id="eval-1", reward=1.0)
    theirs = make_trajectory(other_run, step=5, split="eval", task_id="eval-1", reward=0.5)
    return {
        "project": project,
        "run": run,
        "other_run": other_run,
        "best": best,
        "worst": worst,
        "early": early,
        "late": late,
        "theirs": theirs,
        "step": 1,
        "group": 0,
    }


ROUTES = [
    Route("group_list", ("run",)),
    Route("group_detail", ("run", "step", "group"), "?split=train"),
    Route("diff_best_worst", ("run", "step", "group"), "?split=train", ok=302),
    Route("task_list", ("run",)),
    Route("diff_task_steps", ("run",), "?task=eval-1", ok=302),
    Route("trajectory_detail", ("best",)),
    Route("trajectory_turns", ("best",), "?start=0"),
    Route("trajectory_json", ("best",)),
    Route("trajectory_atif", ("best",)),
    Route("run_atif", ("run",)),
    Route("diff", (), "?a={best}&b={worst}"),
    Route("diff_task_runs", (), "?task=eval-1&x={run}&y={other_run}", ok=302),
    Route("task_flips", ("run",)),
    Route("trajectory_search", ("best",), "?q=answer"),
    Route("compare_trajectories", (), "?ids={best},{worst}"),
]


def route_url(world, route: Route) -> str:
    args = [world[a].pk if hasattr(world[a], "pk") else world[a] for a in route.args]
    query = route.query.format(**{k: getattr(v, "pk", v) for k, v in world.items()})
    return reverse(f"rollouts:{route.name}", args=[world["project"].slug, *args]) + query


@pytest.mark.parametrize(
    "person", [None, "alice", "bob", "carol", "dave", "eve"], ids=lambda p: p or "anonymous"
)
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
def test_members_read_outsiders_get_404_and_strangers_sign_in(client, users, world, route, person):
    if person is not None:
        client.force_login(users[person])

    response = client.get(route_url(world, route))

    if person is None:
        assert response.status_code == 302 and response.url.startswith(reverse("accounts:login"))
    elif person == "eve":
        assert response.status_code == 404
    else:
        assert response.status_code == route.ok, response.content[:300]


def test_the_table_covers_every_reading_page():
    from webapp.rollouts import urls_trajectories

    assert {route.name for route in ROUTES} == {pattern.name for pattern in urls_trajectories.urlpatterns}


@pytest.fixture
def elsewhere(users):
    """A project alice does not belong to, with a run and a trajectory."""
    from tests.conftest import RUBRIC_SPEC
    from webapp.experiments.services import environment_create, rubric_create, run_create
    from webapp.projects.services import project_create

    project = project_create(name="Elsewhere", owner=users["eve"])
    environment = environment_create(
        project=project, name="e", kind="arithmetic_calculator", config={}, user=users["eve"]
    )
    rubric = rubric_create(project=project, name="r", spec=RUBRIC_SPEC, user=users["eve"])
    run, _ = run_create(
        project=project,
        name="hidden",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["eve"],
        dispatch=False,
    )
    return {"run": run, "trajectory": make_trajectory(run, step=1, split="eval", task_id="eval-1")}


def test_objects_of_another_project_are_not_found_through_this_one(client_for, world, elsewhere):
    client = client_for("alice")
    slug = world["project"].slug
    hidden_run, hidden = elsewhere["run"].pk, elsewhere["trajectory"].pk
    for url in (
        reverse("rollouts:trajectory_detail", args=[slug, hidden]),
        reverse("rollouts:trajectory_json", args=[slug, hidden]),
        reverse("rollouts:trajectory_turns", args=[slug, hidden]) + "?start=0",
        reverse("rollouts:group_list", args=[slug, hidden_run]),
        reverse("rollouts:group_detail", args=[slug, hidden_run, 1, 0]),
        reverse("rollouts:diff_best_worst", args=[slug, hidden_run, 1, 0]),
        reverse("rollouts:task_list", args=[slug, hidden_run]),
        reverse("rollouts:diff_task_steps", args=[slug, hidden_run]) + "?task=eval-1",
        reverse("rollouts:diff", args=[slug]) + f"?a={world['best'].pk}&b={hidden}",
        reverse("rollouts:diff_task_runs", args=[slug]) + f"?task=eval-1&x={world['run'].pk}&y={hidden_run}",
    ):
        assert client.get(url).status_code == 404, url


def test_the_run_page_links_to_its_groups_and_evaluation_tasks(client_for, project, run):
    html = (
        client_for("dave")
        .get(reverse("experiments:run_detail", args=[project.slug, run.pk]))
        .content.decode()
    )
    assert reverse("rollouts:group_list", args=[project.slug, run.pk]) in html
    assert reverse("rollouts:task_list", args=[project.slug, run.pk]) in html


def test_search_inside_a_trajectory_and_open_it_at_a_turn(client_for, project, run):
    from tests.webapp.factories import long_turns

    turns = long_turns(120)
    turns[100]["text"] += " needle <b>here</b>"
    turns[110]["tool_result"] = "tool said NEEDLE"
    trajectory = make_trajectory(run, turns=turns)
    url = reverse("rollouts:trajectory_search", args=[project.slug, trajectory.pk])
    body = client_for("dave").get(url, {"q": "needle"}).json()
    assert [m["index"] for m in body["matches"]] == [100, 110] and body["more"] is False
    assert "needle <b>here</b>" in body["matches"][0]["snippet"]  # JSON: the page writes it as text
    assert client_for("dave").get(url, {"q": ""}).status_code == 400
    assert client_for("dave").get(url, {"q": "x" * 201}).status_code == 400
    assert client_for("eve").get(url, {"q": "needle"}).status_code == 404
    page = (
        client_for("dave")
        .get(reverse("rollouts:trajectory_detail", args=[project.slug, trajectory.pk]), {"from": 100})
        .content.decode()
    )
    assert 'id="turn-100"' in page and 'id="turn-99"' not in page and "Turns before #100" in page


def test_a_window_of_big_turns_stops_at_its_character_budget(project, run):
    from webapp.rollouts.selectors import trajectories as trajectory_selectors

    trajectory = make_trajectory(
        run, turns=[turn("tool", "x" * 50_000, tool_result="y" * 50_000) for _ in range(10)]
    )
    window, more = trajectory_selectors.turns_window(trajectory=trajectory, start=0, limit=30)
    assert len(window) == 2 and more  # 200,000 characters > the 120,000 budget after the second turn
    window, more = trajectory_selectors.turns_window(trajectory=trajectory, start=9, limit=30)
    assert len(window) == 1 and not more


def test_a_comment_on_a_turn_of_a_huge_trajectory_is_a_number_not_a_select_of_every_turn():
    from webapp.review.forms import CommentForm

    indexes = list(range(5000))
    form = CommentForm({"body": "look", "turn_index": "4321"}, turn_indexes=indexes)
    assert form.is_valid() and form.cleaned_data["turn_index"] == 4321
    assert "<option" not in str(form["turn_index"])
    assert not CommentForm({"body": "x", "turn_index": "5000"}, turn_indexes=indexes).is_valid()
    small = CommentForm({"body": "x", "turn_index": "3"}, turn_indexes=[0, 1, 2, 3])
    assert small.is_valid() and "turn #3" in str(small["turn_index"])
