"""Every operation of /api/schema/, fuzzed by schemathesis against the real app: no generated request —
valid or not — gets a server error, and every answer (status code, content type, body) is one the
document describes.

Bounded and deterministic: the fuzzing phase's strategies (valid and invalid data) drawn by a
derandomized Hypothesis, a fixed number of cases per operation, no example database. Ids and slugs are
supplied (`world` in conftest.py: a project, an environment, a rubric, runs with trajectories and
checkpoints, a preference queue and its snapshot), so the generated bodies and queries reach the services
instead of stopping at a 404; the ingestion endpoint is called with its run's token.
Requests go through Django's WSGI handler in this process, inside the test's transaction.
"""

from __future__ import annotations

import functools
import os

import hypothesis
import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.generation.meta import TestPhase
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.webapp.api.openapi import DOCUMENT, OPERATIONS

# Per generation mode (valid data, invalid data). SCHEMATHESIS_CASES=500 explores further, outside the suite.
CASES_PER_OPERATION = int(os.environ.get("SCHEMATHESIS_CASES", "15"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@functools.cache
def _schema() -> schemathesis.BaseSchema:
    schema = schemathesis.openapi.from_dict(DOCUMENT)
    schema.app = WSGIHandler()  # requests go through Django in this process
    return schema


@pytest.fixture
def in_the_test_transaction():
    """Django's handler closes the database connection around each request, which would end the test's
    transaction: the test client disconnects the same signal, and so do we."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.parametrize("path, method", OPERATIONS, ids=[f"{m} {p}" for p, m in OPERATIONS])
def test_every_generated_request_is_answered_as_documented(path, method, world, in_the_test_transaction):
    operation = _schema()[path][method]
    fixed = {
        "path_parameters": world.parameters_for(path) if "{" in path else None,
        "headers": {"Authorization": world.authorization(path)},
        "phase": TestPhase.FUZZING,
    }
    strategy = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE, **fixed),
        operation.as_strategy(GenerationMode.NEGATIVE, **fixed),
    )

    @hypothesis.settings(
        max_examples=2 * CASES_PER_OPERATION,
        derandomize=True,  # the same cases on every run
        database=None,
        deadline=None,
        phases=[hypothesis.Phase.generate],  # report the first failure as found, unshrunk
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(case=strategy)
    def call_and_check(case: schemathesis.Case) -> None:
        case.call_and_validate(checks=CHECKS)

    call_and_check()
