"""The Tinker SDK's bodies, both ways: its protobuf messages (SDK ≥ 0.25) and JSON (older SDKs and the
calls that stay JSON), turned into the plain data the worker's model reads (trainers/tinker/compute.py).

The message definitions are the SDK's own generated module (`tinker/proto/tinker_public_pb2.py`), loaded
from the installed wheel by its file: importing the `tinker` package would import torch (its tensor types
do when it is installed), and the web process never imports torch.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import sys
from typing import Any

import numpy as np

PROTOBUF = "application/x-protobuf"
_DTYPES = {1: ("float32", np.float32), 2: ("int64", np.int64), 3: ("int64", np.int32)}


class WireError(ValueError):
    """A body the service cannot read; the message says what is wrong (a 400 for the SDK to show)."""


@functools.cache
def pb() -> Any:
    loaded = sys.modules.get("tinker.proto.tinker_public_pb2")
    if loaded is not None:  # the SDK itself is imported in this process (tests): one descriptor pool entry
        return loaded
    spec = importlib.util.find_spec("tinker")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the `tinker` package is not installed: pip install 'rollout-studio[server]'")
    path = f"{list(spec.submodule_search_locations)[0]}/proto/tinker_public_pb2.py"
    module_spec = importlib.util.spec_from_file_location("rollout_studio_tinker_public_pb2", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def decompress(body: bytes, encoding: str) -> bytes:
    if encoding.strip().lower() != "zstd":
        return body
    import zstandard

    try:
        return zstandard.ZstdDecompressor().decompressobj().decompress(body)
    except zstandard.ZstdError as exc:
        raise WireError(f"The zstd body could not be decompressed: {exc}") from exc


# --- requests ---------------------------------------------------------------------------------------------


def _tensor_from_proto(msg: Any) -> dict[str, Any]:
    if msg.dtype not in _DTYPES:
        raise WireError(f"Unsupported tensor dtype {msg.dtype} in loss_fn_inputs.")
    name, np_dtype = _DTYPES[msg.dtype]
    if msg.HasField("sparse_csr"):
        raise WireError("Sparse loss_fn_inputs are not supported by this service.")
    data = np.frombuffer(msg.dense, dtype=np_dtype)
    return {"data": data.tolist(), "dtype": name, "shape": list(msg.shape) or [len(data)]}


def _chunk_tokens(chunk: Any) -> list[int]:
    kind = chunk.WhichOneof("chunk") if hasattr(chunk, "WhichOneof") else None
    if kind not in (None, "encoded_text"):
        raise WireError(f"Only text model inputs are supported by this service (got a {kind} chunk).")
    return np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist()


def forward_backward_from_proto(body: bytes) -> dict[str, Any]:
    msg = pb().ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # noqa: BLE001 — protobuf's DecodeError and friends
        raise WireError(f"Not a ForwardBackwardRequest: {exc}") from exc
    config: dict[str, Any] = {k: v for k, v in msg.loss_fn_config.items()}
    for key, value in msg.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else value.number
    data = [
        {
            "tokens": [t for chunk in datum.model_input for t in _chunk_tokens(chunk)],
            "inputs": {name: _tensor_from_proto(t) for name, t in datum.loss_fn_inputs.items()},
        }
        for datum in msg.data
    ]
    return {
        "model_id": msg.model_id,
        "seq_id": msg.seq_id,
        "body": {
            "data": data,
            "loss_fn": msg.loss_fn,
            "loss_fn_config": config or None,
            "forward_only": msg.forward_only,
        },
    }


def tokens_of_model_input(model_input: Any) -> list[int]:
    """A JSON ModelInput ({"chunks": [{"type": "encoded_text", "tokens": [...]}]}) as its tokens."""
    if not isinstance(model_input, dict) or not isinstance(model_input.get("chunks"), list):
        raise WireError("model_input must be an object with a list of chunks.")
    tokens: list[int] = []
    for chunk in model_input["chunks"]:
        if not isinstance(chunk, dict) or chunk.get("type", "encoded_text") != "encoded_text":
            raise WireError("Only text model inputs (encoded_text chunks) are supported by this service.")
        tokens.extend(int(t) for t in chunk.get("tokens", []))
    return tokens


def _tensor_from_json(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or "data" not in value:
        raise WireError("A loss_fn_inputs tensor must be an object with data, dtype and shape.")
    data = list(np.asarray(value["data"]).flatten().tolist())
    return {"data": data, "dtype": value.get("dtype", "float32"), "shape": value.get("shape") or [len(data)]}


def forward_backward_from_json(payload: dict[str, Any], *, forward_only: bool = False) -> dict[str, Any]:
    """The JSON body older SDKs send to /forward_backward and /forward."""
    spec = payload.get("forward_backward_input") or payload.get("forward_input") or {}
    data = [
        {
            "tokens": tokens_of_model_input(datum.get("model_input")),
            "inputs": {k: _tensor_from_json(v) for k, v in (datum.get("loss_fn_inputs") or {}).items()},
        }
        for datum in spec.get("data") or []
    ]
    return {
        "model_id": payload.get("model_id", ""),
        "seq_id": payload.get("seq_id"),
        "body": {
            "data": data,
            "loss_fn": spec.get("loss_fn", "cross_entropy"),
            "loss_fn_config": spec.get("loss_fn_config"),
            "forward_only": forward_only,
        },
    }


# --- results ----------------------------------------------------------------------------------------------


def forward_backward_output_proto(result: dict[str, Any]) -> bytes:
    """ForwardBackwardOutput: one ArrayRecord whose fields batch every datum's tensors (float32)."""
    msg = pb().ForwardBackwardOutput()
    msg.loss_fn_output_type = result.get("loss_fn_output_type", "ArrayRecord")
    for key, value in (result.get("metrics") or {}).items():
        msg.metrics[key] = float(value)
    outputs = result.get("loss_fn_outputs") or []
    if outputs:
        record = msg.loss_fn_outputs.add()
        record.type_tag = msg.loss_fn_output_type
        record.num_datums = len(outputs)
        for name in outputs[0]:
            arrays = [np.asarray(out[name]["data"], dtype=np.float32) for out in outputs]
            offsets = np.cumsum([0] + [a.nbytes for a in arrays]).astype(np.int64)
            field = record.fields[name]
            field.data = b"".join(a.tobytes() for a in arrays)
            field.offsets = offsets.tobytes()
            field.dtype = 1  # DTYPE_FLOAT32
    return msg.SerializeToString()


def forward_backward_output_json(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "loss_fn_output_type": result.get("loss_fn_output_type", "ArrayRecord"),
        "loss_fn_outputs": result.get("loss_fn_outputs") or [],
        "metrics": result.get("metrics") or {},
    }


def sample_response_proto(result: dict[str, Any]) -> bytes:
    msg = pb().SampleResponse()
    for seq in result.get("sequences") or []:
        out = msg.sequences.add()
        out.stop_reason = 1 if seq.get("stop_reason") == "length" else 0
        out.tokens = np.asarray(seq["tokens"], dtype=np.int32).tobytes()
        out.logprobs = np.asarray(seq["logprobs"], dtype=np.float32).tobytes()
    if result.get("prompt_logprobs") is not None:
        values = [math.nan if v is None else v for v in result["prompt_logprobs"]]
        msg.prompt_logprobs = np.asarray(values, dtype=np.float32).tobytes()
    return msg.SerializeToString()


def sample_response_json(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "sample",
        "sequences": [
            {"stop_reason": s["stop_reason"], "tokens": s["tokens"], "logprobs": s["logprobs"]}
            for s in result.get("sequences") or []
        ],
        "prompt_logprobs": result.get("prompt_logprobs"),
    }
