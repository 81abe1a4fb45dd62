"""Writes for environments, rubrics and runs, one module per aggregate. Views, API endpoints and tasks call
these.

- `environments`, `rubrics`: versioned definitions (`definitions`: the rules they share)
- `runs`: create a run (config, pinned versions, ingestion token, queued after commit), tags and note
- `dpo`: DPO runs from a preference snapshot
- `lineage`: resume, fork, automatic resume, a run from a checkpoint's weights
- `transitions`: status changes (`run_transition`), cancel, progress
- `heartbeats`: a running run's heartbeat

Validation uses the registries in `trainers/` (JSON schemas), so the browser, the API and the trainer
agree on what a valid config is. Every write is atomic: a validation error writes nothing. The names
below are the package's public ones; code in the web app imports them from their module.
"""

from webapp.experiments.services.definitions import definition_errors
from webapp.experiments.services.dpo import dpo_base_model, dpo_params, run_create_dpo
from webapp.experiments.services.environments import (
    environment_create,
    environment_update,
    validate_environment_config,
)
from webapp.experiments.services.heartbeats import run_heartbeat
from webapp.experiments.services.lineage import (
    run_auto_resume,
    run_create_from_checkpoint,
    run_fork,
    run_resume,
)
from webapp.experiments.services.rubrics import rubric_create, rubric_update, validate_rubric_spec
from webapp.experiments.services.runs import (
    RUN_NOTE_MAX_CHARS,
    RUN_TAG_MAX_CHARS,
    RUN_TAGS_MAX,
    run_annotate,
    run_config_errors,
    run_create,
    run_dispatch_pending,
    run_issue_ingest_token,
)
from webapp.experiments.services.transitions import run_record_progress, run_request_cancel, run_transition

__all__ = [
    "RUN_NOTE_MAX_CHARS",
    "RUN_TAGS_MAX",
    "RUN_TAG_MAX_CHARS",
    "definition_errors",
    "dpo_base_model",
    "dpo_params",
    "environment_create",
    "environment_update",
    "rubric_create",
    "rubric_update",
    "run_annotate",
    "run_auto_resume",
    "run_config_errors",
    "run_create",
    "run_dispatch_pending",
    "run_create_dpo",
    "run_create_from_checkpoint",
    "run_fork",
    "run_heartbeat",
    "run_issue_ingest_token",
    "run_record_progress",
    "run_request_cancel",
    "run_resume",
    "run_transition",
    "validate_environment_config",
    "validate_rubric_spec",
]
