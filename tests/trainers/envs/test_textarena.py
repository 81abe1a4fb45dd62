"""The `textarena` kind on real TextArena games, offline."""

from __future__ import annotations

import random
import re

import pytest

from trainers.envs.base import run_episode
from trainers.registry import environment_kind


def build(config):
    return environment_kind("textarena").build(config)


def guesser():
    bounds = [1, 20]
    last = [0]

    def policy(messages):
        text = messages[-1]["content"]
        if "higher" in text:
            bounds[0] = last[0] + 1
        elif "lower" in text:
            bounds[1] = last[0] - 1
        last[0] = (bounds[0] + bounds[1]) // 2
        return f"I guess [{last[0]}]"

    return policy


def test_guess_the_number_is_won_by_binary_search_and_the_games_reward_is_kept():
    env = build({"game": "GuessTheNumber-v0"})
    task = env.tasks("train", 1, seed=0)[0]
    trajectory = run_episode(env, task, 0, guesser())
    assert trajectory.turns[1].text.startswith("You are Player 0. You are playing Guess The Number.")
    assert trajectory.status == "ok" and trajectory.env_reward == 1.0
    assert trajectory.info["last_step"]["correct"]
    state = trajectory.info["final_state"]
    assert state["done"] and any("GUESS HISTORY" in line for line in state["board"])


def test_the_same_seed_replays_the_same_game_and_the_callers_random_is_untouched():
    env = build({"game": "GuessTheNumber-v0"})
    task = env.tasks("eval", 1, seed=0)[0]
    random.seed(7)
    expected = random.random()
    random.seed(7)
    first = run_episode(env, task, 0, guesser())
    assert random.random() == expected
    second = run_episode(build({"game": "GuessTheNumber-v0"}), task, 0, guesser())
    assert [t.text for t in first.turns] == [t.text for t in second.turns]


def test_eval_games_are_the_same_whatever_the_runs_seed():
    env = build({"game": "Mastermind-v0"})
    assert [t.id for t in env.tasks("eval", 5, seed=0)] == [t.id for t in env.tasks("eval", 5, seed=9)]
    assert not {t.id for t in env.tasks("eval", 20, seed=0)} & {t.id for t in env.tasks("train", 200, seed=0)}


def test_an_invalid_move_is_the_games_business():
    env = build({"game": "TowerOfHanoi-v0", "max_turns": 5})
    task = env.tasks("train", 1, seed=0)[0]
    first = env.reset(task, 0)
    assert "Tower of Hanoi" in first
    result = env.step("move the big one")
    assert result.observation and "invalid move" in result.observation.lower()
    assert env.state()["board"]


def test_a_game_still_running_at_max_turns_is_truncated_with_no_reward():
    env = build({"game": "Sudoku-v0", "max_turns": 2})
    trajectory = run_episode(env, env.tasks("train", 1, seed=0)[0], 0, lambda m: "[A1 5]")
    assert trajectory.status == "truncated" or trajectory.env_reward <= 0.0


@pytest.mark.parametrize("game", ["Mastermind-v0", "Minesweeper-v0", "FifteenPuzzle-v0", "LightsOut-v0"])
def test_offline_games_start_and_take_a_move(game):
    env = build({"game": game, "max_turns": 2})
    first = env.reset(env.tasks("train", 1, seed=0)[0], 0)
    assert len(first) > 50
    env.step("[1 2 3 4]")
    assert env.state()["turn"] == 1


def test_an_unknown_game_fails_when_built():
    with pytest.raises(ValueError, match=re.escape("TextArena cannot make 'GuessTheNumber-v0'")):
        build({"game": "GuessTheNumber-v0", "game_args": {"bogus": 1}})
