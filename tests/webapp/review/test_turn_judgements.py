"""Per-turn preferences: carol marks the turn where a trajectory went wrong, or prefers one sibling's turn
over another's at the same point; the per-turn rewards they attribute appear beside the turns and come
back from the API. alice owns the project, bob researches, carol annotates, dave views, eve is outside.
"""

from __future__ import annotations

import json
import re

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from tests.webapp.factories import make_trajectory as make_stored
from tests.webapp.factories import turn
from tests.webapp.review_factories import make_group, make_trajectory
from webapp.review import selectors, services
from webapp.review.models import Activity, TurnJudgement

# make_trajectory(tool=True): system #0, user #1, assistant #2 (the call), tool #3, assistant #4 (the answer)


@pytest.fixture
def pair(run):
    """Two samples of one GRPO group: same task, same prompt, different answers."""
    return (
        make_trajectory(run, sample=0, answer="4", tool=True, reward=1.0),
        make_trajectory(run, sample=1, answer="5", tool=True, reward=0.0),
    )


def api(client, method: str, trajectory, body=None):
    url = f"/api/trajectories/{trajectory.pk}/turn-judgements/"
    return client.generic(
        method, url, json.dumps(body) if body is not None else None, content_type="application/json"
    )


def test_a_wrong_mark_gives_the_turns_before_plus_and_the_marked_turn_minus(pair, users):
    good, bad = pair
    services.turn_mark_wrong(trajectory=bad, annotator=users["carol"], turn_index=4)
    assert selectors.turn_judgements(bad).rewards == {2: 1.0, 4: -1.0}
    # Marking again moves carol's mark; bob's mark counts beside hers.
    services.turn_mark_wrong(trajectory=bad, annotator=users["carol"], turn_index=2)
    services.turn_mark_wrong(trajectory=bad, annotator=users["bob"], turn_index=4)
    judged = selectors.turn_judgements(bad, users["carol"])
    assert judged.rewards == {2: 0.0, 4: -1.0} and judged.marks == {2: 1, 4: 1} and judged.mine == 2
    assert TurnJudgement.objects.filter(trajectory=bad).count() == 2
    assert selectors.turn_judgements(good).rewards == {}
    assert Activity.objects.filter(verb="turn.judged", trajectory=bad).count() == 3


@pytest.mark.parametrize(
    ("index", "message"), [(3, "is a tool turn"), (9, "has no turn 9"), (None, "Say which turn")]
)
def test_only_the_models_turns_can_be_marked(pair, users, index, message):
    with pytest.raises(ValidationError) as error:
        services.turn_mark_wrong(trajectory=pair[1], annotator=users["carol"], turn_index=index)
    assert message in error.value.message_dict["turn_index"][0]


def test_a_turn_preference_at_the_same_point_credits_one_turn_and_blames_the_other(pair, users):
    good, bad = pair
    services.turn_prefer(
        trajectory=good, turn_index=4, other=bad, other_turn_index=4, annotator=users["carol"]
    )
    assert selectors.turn_judgements(good).rewards == {4: 1.0}
    assert selectors.turn_judgements(bad).rewards == {4: -1.0}
    assert selectors.turn_judgements(bad).preferences == {4: (0, 1)}
    # Changing one's mind replaces the preference instead of adding the opposite one.
    services.turn_prefer(
        trajectory=bad, turn_index=4, other=good, other_turn_index=4, annotator=users["carol"]
    )
    assert selectors.turn_judgements(good).rewards == {4: -1.0}
    assert TurnJudgement.objects.count() == 1
    assert services.turn_judgements_withdraw(trajectory=good, annotator=users["carol"]) == 1
    assert selectors.turn_judgements(bad).rewards == {}


def test_turns_are_compared_only_at_the_same_point_of_the_same_task(run, pair, users):
    good, _bad = pair
    other_task = make_trajectory(run, group=3, tool=True)
    different_call = make_trajectory(run, sample=2, answer="4", tool=True)
    different_call.turns.filter(index=2).update(text='<tool>{"name": "mul"}</tool>')
    cases = [
        (other_task, 4, "other", "another task"),
        (good, 4, "other", "another trajectory"),
        (different_call, 4, "turn_index", "differ before turn 4 (at turn 2)"),
        (different_call, 2, "other_turn_index", "same index"),
    ]
    for other, other_index, field, message in cases:
        with pytest.raises(ValidationError) as error:
            services.turn_prefer(
                trajectory=good,
                turn_index=4,
                other=other,
                other_turn_index=other_index,
                annotator=users["carol"],
            )
        assert message in error.value.message_dict[field][0], (field, message)
    # At the first turn where they diverge (turn 2) the comparison stands.
    services.turn_prefer(
        trajectory=good, turn_index=2, other=different_call, other_turn_index=2, annotator=users["carol"]
    )


def test_the_api_records_a_mark_and_answers_bad_input_with_field_errors(pair, signed_in):
    good, bad = pair
    carol = signed_in("carol")
    response = api(carol, "POST", bad, {"verdict": "wrong", "turn_index": 4})
    assert response.status_code == 201, response.content
    assert response.json()["turn_rewards"] == {"2": 1.0, "4": -1.0}
    assert response.json()["judgements"][0]["annotator"] == "carol"
    assert api(signed_in("dave"), "GET", bad).json()["turn_rewards"] == {"2": 1.0, "4": -1.0}

    for body, field in (
        ({"verdict": "wrong", "turn_index": 3}, "turn_index"),
        ({"verdict": "maybe", "turn_index": 4}, "verdict"),
        ({"verdict": "wrong", "turn_index": -1}, "turn_index"),
        ({"verdict": "better", "turn_index": 4}, "other"),
    ):
        refused = api(carol, "POST", bad, body)
        assert refused.status_code == 400 and refused["Content-Type"] == "application/json", body
        assert field in json.dumps(refused.json()), (body, refused.json())

    response = api(carol, "POST", good, {"verdict": "better", "turn_index": 4, "other": bad.pk})
    assert response.status_code == 201 and response.json()["turn_rewards"] == {"4": 1.0}
    assert api(signed_in("dave"), "POST", bad, {"verdict": "wrong", "turn_index": 4}).status_code == 403
    assert api(signed_in("eve"), "GET", bad).status_code == 404
    assert api(carol, "DELETE", bad).status_code == 204
    assert api(carol, "GET", bad).json() == {"turn_rewards": {}, "judgements": []}


def test_carol_marks_a_turn_on_the_trajectory_page_and_sees_the_judged_rewards(pair, project, client_for):
    _good, bad = pair
    page = reverse("rollouts:trajectory_detail", args=[project.slug, bad.pk])
    client = client_for("carol")
    html = client.get(page).content.decode()
    # One button per model turn, none on the prompt or the tool output.
    assert re.findall(r'name="turn_index" value="(\d+)"', html) == ["2", "4"]
    assert "data-judged-reward" not in html

    judge = reverse("review:turn_judge", args=[project.slug, bad.pk])
    response = client.post(judge, {"verdict": "wrong", "turn_index": "4"})
    assert response.status_code == 302 and response["Location"] == f"{page}#turn-4"
    html = client.get(page).content.decode()
    assert re.findall(r'data-judged-reward="([-\d.]+)"', html) == ["1.0", "-1.0"]
    assert "judged <strong>-1.00</strong> · marked wrong by 1" in html
    assert "your mark: went wrong here" in html and "Clear my mark" in html

    # A refused mark says why on the page it came from.
    response = client.post(judge, {"verdict": "wrong", "turn_index": "3"}, follow=True)
    assert "The turn judgement was not saved: " in response.content.decode()

    # dave (viewer) sees the judged rewards but no buttons; he may not post.
    html = client_for("dave").get(page).content.decode()
    assert 'data-judged-reward="-1.0"' in html and "Went wrong here" not in html
    assert client_for("dave").post(judge, {"verdict": "wrong", "turn_index": "2"}).status_code == 403

    client_for("carol").post(judge, {"verdict": "clear", "turn_index": "4"})
    assert "data-judged-reward" not in client_for("carol").get(page).content.decode()


def test_a_snapshot_with_turns_holds_step_level_rows_for_a_reward_model(run, project, users):
    first, second = make_group(run, group=1, rewards=[1.0, 0.0], tool=True)
    queue = services.queue_create(
        project=project, user=users["bob"], name="turns", runs=[run], annotators=[users["carol"]], seed=1
    )
    services.turn_mark_wrong(trajectory=second, annotator=users["carol"], turn_index=4)
    services.turn_prefer(
        trajectory=first, turn_index=2, other=second, other_turn_index=2, annotator=users["carol"]
    )

    plain = services.snapshot_create(queue, users["bob"])
    assert services.snapshot_pairs(plain) == []  # no pair judged, and turns only on request

    snapshot = services.snapshot_create(queue, users["bob"], include_turns=True)
    rows = services.snapshot_pairs(snapshot)
    call = '<tool>{"name": "add"}</tool>'
    whole = f"assistant: {call}\ntool (add): answer 1.1\nassistant: <answer>answer 1.1</answer>"
    assert [(r["chosen"], r["rejected"], r["provenance"]["label"]) for r in rows] == [
        (call, call, "better"),  # first's turn 2 over second's, after the same prompt
        (call, "", 1.0),  # second's call was fine: better than nothing said yet
        (call, whole, -1.0),  # its answer is where it went wrong: the conversation before it is better
    ]
    assert {r["provenance"]["kind"] for r in rows} == {"turn"}
    assert rows[1]["provenance"]["chosen_trajectory"] == second.pk
    assert snapshot.provenance["counts"]["turn_rows"] == 3 and snapshot.provenance["include_turns"] is True


def test_bob_asks_the_queue_page_for_a_snapshot_with_the_turn_judgements(run, project, users, client_for):
    _, second = make_group(run, group=1, rewards=[1.0, 0.0], tool=True)
    queue = services.queue_create(
        project=project, user=users["bob"], name="turns", runs=[run], annotators=[users["carol"]], seed=1
    )
    services.turn_mark_wrong(trajectory=second, annotator=users["carol"], turn_index=4)
    page = reverse("review:queue_detail", args=[project.slug, queue.pk])
    assert 'name="include_turns"' in client_for("bob").get(page).content.decode()

    url = reverse("review:snapshot_create", args=[project.slug, queue.pk])
    answer = client_for("bob").post(url, {"include_turns": "on"}, follow=True)

    snapshot = queue.snapshots.get()
    assert snapshot.provenance["include_turns"] is True and snapshot.provenance["counts"]["turn_rows"] == 2
    assert "and 2 step-level rows from turn judgements" in answer.content.decode()


def episode(run, group: int, sample: int, a: int, b: int, answer: str, reward: float):
    call = f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{a} + {b}"}}}}</tool_call>'
    return make_stored(
        run,
        group=group,
        sample=sample,
        task_id=f"add-{a}-{b}",
        prompt=f"What is {a} + {b}?",
        reward=reward,
        turns=[
            turn("system", "You add numbers with the calculator."),
            turn("user", f"What is {a} + {b}?"),
            turn("assistant", call, tool_name="calculator"),
            turn("tool", "", tool_name="calculator", tool_result=str(a + b)),
            turn("assistant", answer),
        ],
    )


@pytest.mark.slow
def test_marked_turns_train_a_step_level_reward_that_the_trainer_credits(run, project, users, tmp_path):
    """The whole route: carol marks where broken episodes went wrong → a snapshot with turn rows → a
    Bradley–Terry reward model on the bundled model → scored per turn, a new broken answer's turn gets a
    negative reward → its tokens get a lower advantage than the call before it."""
    from trainers.learn import turn_credit
    from trainers.learn.reward_training import load_encoder
    from trainers.recipes.reward_model import train_reward_model
    from trainers.rubrics import score_group
    from trainers.types import Task, Trajectory, Turn
    from workers.reward_execution import training_pairs

    for g, (a, b) in enumerate([(12, 30), (7, 8), (21, 4), (33, 9), (5, 16), (40, 2), (18, 18), (9, 27)]):
        # as the verifier scored them: a queue pairs responses whose rewards differ (its default)
        episode(run, g, 0, a, b, f"<answer>{a + b}</answer>", reward=1.0)
        broken = episode(run, g, 1, a, b, "<answer>TOOL_NAME</answer>", reward=0.0)
        services.turn_mark_wrong(trajectory=broken, annotator=users["carol"], turn_index=4)
    queue = services.queue_create(
        project=project, user=users["bob"], name="steps", runs=[run], annotators=[users["carol"]], seed=2
    )
    rows = services.snapshot_pairs(services.snapshot_create(queue, users["bob"], include_turns=True))
    assert len(rows) == 16  # per broken episode: its call (+1) and its answer (−1)
    result = train_reward_model(
        training_pairs(rows), out_dir=tmp_path / "rm", encoder=load_encoder(), seed=0, held_out_fraction=0.25
    )
    assert result.held_out_accuracy >= 0.75, result.metrics()

    spec = {
        "criteria": [
            {
                "name": "steps",
                "kind": "learned_reward",
                "weight": 1.0,
                "params": {"path": str(tmp_path / "rm"), "per_turn": True},
            }
        ]
    }

    def fresh(answer: str) -> Trajectory:  # a task none of the rows had
        call = '<tool_call>{"name": "calculator", "arguments": {"expression": "26 + 17"}}</tool_call>'
        task = Task("add-26-17", "What is 26 + 17?")
        return Trajectory(
            task=task,
            turns=[
                Turn("system", "You add numbers with the calculator."),
                Turn("user", "What is 26 + 17?"),
                Turn("assistant", call, tool_name="calculator"),
                Turn("tool", "43", tool_name="calculator", tool_result="43"),
                Turn("assistant", answer),
            ],
        )

    good, broken = score_group(spec, [fresh("<answer>43</answer>"), fresh("<answer>TOOL_NAME</answer>")])
    assert broken.turn_rewards[4] < 0 and broken.turn_rewards[4] < good.turn_rewards[4]
    steps = turn_credit.step_advantages([good.turn_rewards, broken.turn_rewards])
    owners = [2] * 5 + [3] * 2 + [4] * 4  # the call, the tool result, the answer, by completion token
    tokens = turn_credit.token_advantages(0.0, steps[1], owners, weight=1.0)
    assert tokens is not None and max(tokens[7:]) < min(tokens[:5])  # the broken answer is pushed down
