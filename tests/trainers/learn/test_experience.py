"""Training-Free GRPO's library part: what an experience model's answer does to the library."""

from __future__ import annotations

from trainers.learn.experience import (
    Edit,
    ExperienceLibrary,
    contrast_prompt,
    has_contrast,
    parse_edits,
    step_diff,
)


def test_line_answers_become_edits_and_chatter_is_ignored():
    answer = (
        "Sure! Here are my edits.\n"
        "1. ADD: Check the arithmetic before answering.\n"
        "- MODIFY G2: Put the final number inside <answer> tags.\n"
        "DELETE G1\n"
        "That is all."
    )
    assert parse_edits(answer, max_edits=5) == [
        Edit("add", "", "Check the arithmetic before answering."),
        Edit("modify", "G2", "Put the final number inside <answer> tags."),
        Edit("delete", "G1", ""),
    ]
    assert len(parse_edits(answer, max_edits=2)) == 2
    assert parse_edits("NONE") == []


def test_json_answers_as_the_reference_code_asks_for_them():
    answer = 'Edits: [{"operation": "add", "content": "Use the tool"}, {"option": "delete", "id": "G3"}]'
    assert parse_edits(answer) == [Edit("add", "", "Use the tool"), Edit("delete", "G3", "")]


def test_the_library_applies_edits_and_says_why_it_refused_some():
    library = ExperienceLibrary(max_items=2)
    records = library.apply(
        [
            Edit("add", "", "Check the sum."),
            Edit("add", "", "check the   SUM."),  # the same insight again
            Edit("add", "", "Answer briefly."),
            Edit("add", "", "A third one."),  # over the limit
            Edit("modify", "G2", "Answer in one word."),
            Edit("delete", "G9", ""),
        ]
    )
    assert library.items == {"G1": "Check the sum.", "G2": "Answer in one word."}
    assert [r["applied"] for r in records] == [True, False, True, False, True, False]
    assert records[1]["reason"] == "already in the library"
    assert records[3]["reason"] == "the library is full (2)"
    assert records[4]["before"] == "Answer briefly."
    assert records[5]["reason"] == "no experience G9"
    assert step_diff(records) == {"added": 2, "modified": 1, "deleted": 0, "refused": 3}
    library.apply([Edit("delete", "G1", "")])
    library.apply([Edit("add", "", "New.")])
    assert list(library.items) == ["G2", "G3"]  # ids are never reused
    assert ExperienceLibrary.from_dict(library.to_dict()).items == library.items


def test_an_edit_that_copies_the_formats_placeholder_is_refused():
    """SmolLM2-135M answered `ADD: <one short, general insight …>` verbatim: that is no experience."""
    library = ExperienceLibrary()
    records = library.apply(
        parse_edits(
            "ADD: <one short, general insight that would help on similar tasks>\n"
            "ADD: Check the units before answering.\n"
            "MODIFY G2: <the improved text of experience G2>"
        )
    )
    assert [(r["applied"], r["reason"]) for r in records] == [
        (False, "repeats the instructions' placeholder"),
        (True, ""),
        (False, "repeats the instructions' placeholder"),
    ]
    assert list(library.items.values()) == ["Check the units before answering."]


def test_the_prompt_shows_the_library_and_the_contrast():
    library = ExperienceLibrary()
    assert library.prompt_block() == ""
    library.apply([Edit("add", "", "Check the sum.")])
    assert "[G1] Check the sum." in library.prompt_block()
    prompt = contrast_prompt("What is 2+3?", [(0.0, "6"), (1.0, "5")], library)
    assert prompt.index("Better attempt (reward 1.00)\n5") < prompt.index("Worse attempt (reward 0.00)\n6")
    assert "G1: Check the sum." in prompt
    assert has_contrast([0.0, 1.0]) and not has_contrast([1.0, 1.0]) and not has_contrast([])
