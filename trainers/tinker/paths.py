"""`tinker://` paths and model ids, formed and read in one place (the worker forms them, the web app reads them).

A training client's model id is `rs-run-<run id>` (what `create_model` answers); a client made by
`create_training_client_from_state` is addressed by the id the SDK derives itself,
`<session id>:train:<model seq id>` (its alias). A saved checkpoint is
`tinker://<model id>/<segment>/<name>`: `weights` for `save_state` (with the optimizer), `sampler_weights`
for `save_weights_for_sampler`; the worker keeps it under `<run artifacts>/tinker/<segment>/<name>`, so a
Checkpoint row's path ends with the path's last two parts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

SCHEME = "tinker://"
MODEL_ID_PREFIX = "rs-run-"
# The sampler id of a model's own weights without its adapters: `create_sampling_client(base_model=…)`.
BASE_SAMPLER = "base"
# The path segment of a checkpoint → the SDK's `checkpoint_type`.
SEGMENT_TYPES = {"weights": "training", "sampler_weights": "sampler"}
_ALIAS = re.compile(r"^(?P<session>[^/:]+):train:(?P<seq>\d+)$")


def model_id(run_id: int) -> str:
    return f"{MODEL_ID_PREFIX}{run_id}"


def run_id_of(model_id_text: str) -> int | None:
    """The run of an `rs-run-<n>` model id (None for anything else, aliases included)."""
    digits = model_id_text.removeprefix(MODEL_ID_PREFIX) if model_id_text.startswith(MODEL_ID_PREFIX) else ""
    return int(digits) if digits.isdigit() else None


def alias(session_id: str, model_seq_id: int) -> str:
    """The model id the SDK (≥ 0.38) derives for a client it creates by loading weights."""
    return f"{session_id}:train:{model_seq_id}"


def is_alias(model_id_text: str) -> bool:
    return bool(_ALIAS.match(model_id_text))


def safe_name(name: str) -> str:
    """A checkpoint name as a directory name (and the path's last part)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:100] or "checkpoint"


@dataclass(frozen=True)
class TinkerPath:
    model_id: str
    segment: str  # weights | sampler_weights
    name: str

    def __str__(self) -> str:
        return f"{SCHEME}{self.model_id}/{self.segment}/{self.name}"

    @property
    def checkpoint_id(self) -> str:
        """What the SDK's REST routes call the checkpoint: `weights/<name>`."""
        return f"{self.segment}/{self.name}"

    @property
    def checkpoint_type(self) -> str:
        return SEGMENT_TYPES[self.segment]

    @property
    def run_id(self) -> int | None:
        return run_id_of(self.model_id)

    @property
    def local_suffix(self) -> str:
        """How the checkpoint's directory ends: `tinker/<segment>/<name>`."""
        return f"tinker/{self.segment}/{self.name}"


def form(model_id_text: str, segment: str, name: str) -> str:
    return str(TinkerPath(model_id_text, segment, name))


def parse(path: str) -> TinkerPath:
    """`tinker://<model id>/<segment>/<name>`; ValueError saying what is wrong otherwise."""
    if not isinstance(path, str) or not path.startswith(SCHEME):
        raise ValueError(f"Not a tinker path: {path!r} (expected tinker://<run>/weights/<name>).")
    parts = path.removeprefix(SCHEME).split("/")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"Not a tinker path: {path!r} (expected tinker://<run>/weights/<name>).")
    return checkpoint(parts[0], f"{parts[1]}/{parts[2]}")


def checkpoint(model_id_text: str, checkpoint_id: str) -> TinkerPath:
    """The path of a run's `checkpoint_id` (`weights/<name>`, as the REST routes name it)."""
    segment, _, name = checkpoint_id.partition("/")
    if segment not in SEGMENT_TYPES or not name or "/" in name:
        raise ValueError(
            f"Unknown checkpoint {checkpoint_id!r}: expected weights/<name> or sampler_weights/<name>."
        )
    return TinkerPath(model_id_text, segment, name)


def of_local(model_id_text: str, local_path: str) -> TinkerPath | None:
    """The tinker path of a checkpoint directory the worker saved (None for a directory of another layout)."""
    local = PurePath(local_path)
    if len(local.parts) < 3 or local.parent.parent.name != "tinker" or local.parent.name not in SEGMENT_TYPES:
        return None
    return TinkerPath(model_id_text, local.parent.name, local.name)
