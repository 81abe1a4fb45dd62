"""Request-body parsing: the fast parser reads documents exactly as Python's json does."""

from __future__ import annotations

import json

import pytest
from rest_framework import exceptions

from webapp.api.parsers import load_json


def test_a_metrics_batch_reads_as_pythons_json_reads_it():
    body = json.dumps(
        {
            "events": [
                {"seq": 1, "type": "metrics", "step": 3, "values": {"loss": 0.1 + 0.2, "kl": -0.0, "n": 7}}
            ]
        }
    ).encode()
    assert load_json(body) == json.loads(body)
    values = load_json(body)["events"][0]["values"]
    assert type(values["n"]) is int and values["loss"] == 0.30000000000000004


def test_an_integer_past_64_bits_stays_exact():
    # A model's tool call may carry one; a float would store 1.2345678901234568e+24.
    body = b'{"tool_args": {"n": 1234567890123456789012345}}'
    assert load_json(body)["tool_args"]["n"] == 1234567890123456789012345


@pytest.mark.parametrize("body", [b"NaN", b"[1e400]", b"{} x", b"\xef\xbb\xbf{}", b""])
def test_what_is_not_json_is_refused_in_the_standard_words(body):
    with pytest.raises(exceptions.ParseError) as excinfo:
        load_json(body)
    assert str(excinfo.value.detail).startswith("The body is not valid JSON")


def test_a_lone_surrogate_is_read_then_refused_by_field():
    with pytest.raises(exceptions.ValidationError) as excinfo:
        load_json(b'{"note": "a\\ud800b"}')
    assert "note" in excinfo.value.detail
