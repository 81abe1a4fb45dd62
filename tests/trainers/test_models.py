"""Model resolution, the cached GGUF conversion, LoRA merging."""

from __future__ import annotations

import copy
import os
import time

import pytest
import torch

from trainers.models import apply_lora, merged_state_dict, model_dir, resolve_model_source


def test_names_resolve_without_touching_the_network(tmp_path):
    bundled = resolve_model_source("smollm2-135m")
    assert bundled.kind == "gguf" and bundled.gguf_file.endswith(".gguf")
    assert resolve_model_source(str(tmp_path)).kind == "local"
    hub = resolve_model_source("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert hub.kind == "hub" and model_dir("HuggingFaceTB/SmolLM2-135M-Instruct") == hub.path


@pytest.mark.slow
def test_gguf_is_converted_once_into_the_cache(smollm, tmp_path, monkeypatch):
    import gguf
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("ROLLOUT_STUDIO_CACHE", str(tmp_path))
    reader = gguf.GGUFReader
    started = time.perf_counter()
    first = model_dir("smollm2-135m")
    converted_in = time.perf_counter() - started
    assert gguf.GGUFReader is reader  # the conversion's one shared parse is its own
    assert first.startswith(str(tmp_path / "models" / "smollm2-135m-"))
    weights = [f for f in os.listdir(first) if f.endswith(".safetensors")]
    assert weights and os.path.exists(os.path.join(first, "tokenizer.json"))
    assert not [f for f in os.listdir(tmp_path / "models") if f.startswith(".")]  # no staging dir left behind
    mtime = os.path.getmtime(os.path.join(first, weights[0]))
    started = time.perf_counter()
    assert model_dir("smollm2-135m") == first
    assert time.perf_counter() - started < converted_in / 5
    assert os.path.getmtime(os.path.join(first, weights[0])) == mtime
    reloaded = AutoModelForCausalLM.from_pretrained(first, dtype=torch.float32).eval()
    ids = torch.tensor([[1, 504, 3458, 314, 253, 1345, 30]])
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, smollm[0](ids).logits)


@pytest.mark.slow
def test_merged_lora_weights_equal_peft_merge(smollm):
    model = apply_lora(
        copy.deepcopy(smollm[0]), {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)  # fresh adapters are zero: make the delta visible
    merged = merged_state_dict(model)
    reference = copy.deepcopy(model).merge_and_unload().state_dict()
    assert set(merged) == set(reference)
    for key, value in reference.items():
        assert torch.allclose(merged[key], value, atol=1e-6), key
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(merged[q], smollm[0].state_dict()[q])
