"""Training-Free GRPO's part: the experience library, the prompt that asks an LLM what distinguished a
group's better samples, and the add / modify / delete edits its answer is parsed into.

The library is a numbered list of short insights ("G3: check the sum before answering") put under the
system prompt of every rollout (`ExperienceLibrary.prompt_block`). Per step, each group whose rewards differ
(the best above the worst: a "semantic advantage" exists) is shown to an LLM with the library as it stands;
the LLM answers with edits in a line format (`EDIT_FORMAT`) — or as JSON, as youtu-agent's reference code
asks for — which `parse_edits` reads and `ExperienceLibrary.apply` applies, recording each edit as it was
applied or why it was refused. Plain Python: the recipe (`trainers.recipes.training_free_grpo`) owns the
model calls; this module owns the rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_EXPERIENCE_CHARS = 300
SAMPLE_CHARS = 600  # how much of each sample's answer the LLM is shown

EDIT_FORMAT = (
    "Answer with edits to the experience list, one per line, and nothing else:\n"
    "ADD: <one short, general insight that would help on similar tasks>\n"
    "MODIFY G<n>: <the improved text of experience G<n>>\n"
    "DELETE G<n>\n"
    "Write at most {max_edits} lines. Write NONE if the list needs no change."
)

_LINE = re.compile(r"^\s*[-*\d.)\s]*\b(ADD|MODIFY|UPDATE|DELETE|REMOVE)\b\s*(G?\d+)?\s*[:\-–]?\s*(.*)$", re.I)
_OPS = {"add": "add", "modify": "modify", "update": "modify", "delete": "delete", "remove": "delete"}


@dataclass(frozen=True)
class Edit:
    """One operation the LLM asked for. `target`: the experience id it names ("G3"; "" for an add)."""

    op: str  # add | modify | delete
    target: str = ""
    text: str = ""


@dataclass
class ExperienceLibrary:
    """The insights in the prompt, by id in the order they were added. Ids are never reused, so an edit or a
    trajectory naming "G4" names one insight for the whole run."""

    max_items: int = 30
    items: dict[str, str] = field(default_factory=dict)
    next_number: int = 1

    def prompt_block(self) -> str:
        """What goes under the system prompt: "" while the library is empty (the prompt is the
        environment's own)."""
        if not self.items:
            return ""
        lines = "\n".join(f"[{key}] {text}" for key, text in self.items.items())
        return f"Experiences from earlier attempts at similar tasks (use them when they apply):\n{lines}"

    def apply(self, edits: Sequence[Edit]) -> list[dict[str, Any]]:
        """Apply `edits` in order; return one record per edit: {op, id, text, before, applied, reason}
        (`before`: the text a modify replaced or a delete removed; `reason`: why an edit was refused)."""
        records = []
        for edit in edits:
            record: dict[str, Any] = {"op": edit.op, "id": edit.target, "text": edit.text, "before": ""}
            record["reason"] = self._apply_one(edit, record)
            record["applied"] = not record["reason"]
            records.append(record)
        return records

    def _apply_one(self, edit: Edit, record: dict[str, Any]) -> str:
        text = " ".join(edit.text.split())[:MAX_EXPERIENCE_CHARS]
        record["text"] = text
        if edit.op != "delete" and echoes_the_format(text):
            return "repeats the instructions' placeholder"
        known = {t.casefold() for t in self.items.values()}
        if edit.op == "add":
            if not text:
                return "empty"
            if text.casefold() in known:
                return "already in the library"
            if len(self.items) >= self.max_items:
                return f"the library is full ({self.max_items})"
            record["id"] = f"G{self.next_number}"
            self.items[record["id"]] = text
            self.next_number += 1
            return ""
        if edit.target not in self.items:
            return f"no experience {edit.target or '(none named)'}"
        record["before"] = self.items[edit.target]
        if edit.op == "delete":
            del self.items[edit.target]
            return ""
        if not text:
            return "empty"
        if text.casefold() in known:
            return "already in the library"
        self.items[edit.target] = text
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "items": [{"id": k, "text": v} for k, v in self.items.items()],
            "next_number": self.next_number,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], max_items: int = 30) -> ExperienceLibrary:
        items = {str(i["id"]): str(i["text"]) for i in data.get("items", [])}
        return cls(max_items=max_items, items=items, next_number=int(data.get("next_number", len(items) + 1)))


# The placeholders of EDIT_FORMAT: a small model often copies them back as its "insight" (SmolLM2-135M
# did in bench/training_free.py); an edit that is one of them is refused, not put in every later prompt.
_PLACEHOLDERS = (
    "one short, general insight that would help on similar tasks",
    "the improved text of experience g",
)


def echoes_the_format(text: str) -> bool:
    """Whether an edit's text is (or merely wraps) one of the edit format's placeholders."""
    plain = " ".join(text.strip().strip("<>").split()).casefold().rstrip(".")
    return any(plain == placeholder or placeholder in plain for placeholder in _PLACEHOLDERS)


def _target(raw: Any) -> str:
    digits = re.sub(r"\D", "", str(raw or ""))
    return f"G{int(digits)}" if digits else ""


def parse_edits(answer: str, max_edits: int = 3) -> list[Edit]:
    """The edits in an LLM's answer, at most `max_edits`: a JSON list of {"operation" (or "option"),
    "id", "content" (or "text")} objects anywhere in it, else the lines of `EDIT_FORMAT`. What matches
    neither is ignored: a small model's chatter costs nothing but its tokens."""
    edits = _json_edits(answer)
    if edits is None:
        edits = []
        for line in answer.splitlines():
            found = _LINE.match(line)
            if not found:
                continue
            op = _OPS[found.group(1).lower()]
            target, text = _target(found.group(2)), found.group(3).strip()
            if op == "add" and found.group(2) and not found.group(2).upper().startswith("G"):
                text = f"{found.group(2)} {text}".strip()  # "ADD 3 steps…": the number was text
                target = ""
            edits.append(Edit(op, "" if op == "add" else target, "" if op == "delete" else text))
    return edits[:max_edits]


def _json_edits(answer: str) -> list[Edit] | None:
    start, end = answer.find("["), answer.rfind("]")
    if start < 0 or end <= start:
        return None
    try:
        data = json.loads(answer[start : end + 1])
    except ValueError:
        return None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        return None
    edits = []
    for d in data:
        op = _OPS.get(str(d.get("operation") or d.get("option") or "").lower())
        if op is None:
            continue
        text = str(d.get("content") or d.get("text") or d.get("experience") or "")
        edits.append(Edit(op, "" if op == "add" else _target(d.get("id")), "" if op == "delete" else text))
    return edits


def has_contrast(rewards: Sequence[float]) -> bool:
    """Whether a group has a semantic advantage to state: its best sample scored above its worst (the
    reference code's "mean strictly between the best and the worst")."""
    return bool(rewards) and max(rewards) > min(rewards)


def contrast_prompt(
    task: str,
    samples: Sequence[tuple[float, str]],
    library: ExperienceLibrary,
    max_edits: int = 3,
) -> str:
    """The prompt that asks what the better samples did that the worse ones did not: the task, the best and
    the worst samples (answer text and reward), the library as it stands, the edit format."""
    ranked = sorted(samples, key=lambda s: -s[0])
    best, worst = ranked[0], ranked[-1]

    def shown(sample: tuple[float, str]) -> str:
        reward, text = sample
        text = text.strip()
        if len(text) > SAMPLE_CHARS:
            text = text[: SAMPLE_CHARS - 1] + "…"
        return f"(reward {reward:.2f})\n{text}"

    current = "\n".join(f"{k}: {v}" for k, v in library.items.items()) or "(empty)"
    return (
        "Several attempts were made at the same task. Compare a better attempt with a worse one and say what "
        "the better one did right, as a lesson for future tasks.\n\n"
        f"Task:\n{task.strip()}\n\nBetter attempt {shown(best)}\n\nWorse attempt {shown(worst)}\n\n"
        f"Current experiences:\n{current}\n\n{EDIT_FORMAT.format(max_edits=max_edits)}"
    )


def step_diff(records: Sequence[dict[str, Any]]) -> dict[str, int]:
    """The applied edits of a step counted by kind: {"added", "modified", "deleted", "refused"}."""
    counts = {"added": 0, "modified": 0, "deleted": 0, "refused": 0}
    names = {"add": "added", "modify": "modified", "delete": "deleted"}
    for r in records:
        counts[names[r["op"]] if r["applied"] else "refused"] += 1
    return counts


# ---- the run knobs (trainers.config adds them to the run schema: one home for what they mean) ---------


def _knob(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "x-group": "training_free"}


TRAINING_FREE_KNOBS: dict[str, Any] = {
    "experience_model": _knob(
        {
            "type": "string",
            "title": "Experience model",
            "description": 'Training-Free GRPO: the LLM that states what distinguished the better samples. "policy" '
            "is the run's own model (its weights never change); otherwise a model the workers serve, or "
            "the model name at the endpoint below.",
            "default": "policy",
            "minLength": 1,
            "maxLength": 200,
        }
    ),
    "experience_base_url": _knob(
        {
            "type": "string",
            "title": "Experience endpoint",
            "description": "Training-Free GRPO: an OpenAI-compatible endpoint (…/v1) serving the experience "
            "model; empty runs it on the worker.",
            "default": "",
            "maxLength": 500,
        }
    ),
    "experience_api_key_secret": _knob(
        {
            "type": "string",
            "title": "Experience endpoint key",
            "description": "Training-Free GRPO: the project secret holding the endpoint's API key (empty: none).",
            "default": "",
            "maxLength": 100,
        }
    ),
    "experience_max_items": _knob(
        {
            "type": "integer",
            "title": "Experience library size",
            "description": "Training-Free GRPO: the most insights the library holds; an add beyond it is refused.",
            "default": 30,
            "minimum": 1,
            "maximum": 500,
        }
    ),
    "experience_max_edits": _knob(
        {
            "type": "integer",
            "title": "Edits per group",
            "description": "Training-Free GRPO: the most edits one group's answer may make.",
            "default": 2,
            "minimum": 1,
            "maximum": 20,
        }
    ),
    "experience_max_new_tokens": _knob(
        {
            "type": "integer",
            "title": "Experience answer tokens",
            "description": "Training-Free GRPO: the longest answer the experience model may write per group.",
            "default": 160,
            "minimum": 8,
            "maximum": 8192,
        }
    ),
    "experience_task_set": _knob(
        {
            "type": "integer",
            "title": "Task set",
            "description": "Training-Free GRPO: the first this-many training tasks, gone over in epochs (one "
            "epoch every task set ÷ prompts per step steps); 0: a new task every time.",
            "default": 0,
            "minimum": 0,
            "maximum": 100_000,
        }
    ),
}
