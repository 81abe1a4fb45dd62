"""Tokenizers for the real chat templates in tests/fixtures/templates, built on the spot.

Each is a byte-level BPE without merges (every byte one token) plus the family's special tokens, wrapped
in `PreTrainedTokenizerFast` with the real template: small, deterministic, and rendered by the same
`apply_chat_template` code as the models' own tokenizers.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "templates"

FAMILIES: dict[str, dict[str, Any]] = {
    "hermes": {
        "template": "Qwen-Qwen2.5-7B-Instruct.jinja",
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "added": ["<tool_call>", "</tool_call>"],  # added but not special in Qwen2.5: they survive decoding
        "bos": None,
        "eos": "<|im_end|>",
    },
    "llama3": {
        "template": "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "special": [
            "<|begin_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|python_tag|>",
        ],
        "added": [],
        "bos": "<|begin_of_text|>",
        "eos": "<|eot_id|>",
    },
    "qwen3": {
        "template": "Qwen-Qwen3-0.6B.jinja",
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        # added, not special, in Qwen3: they survive decoding
        "added": [
            "<tool_call>",
            "</tool_call>",
            "<think>",
            "</think>",
            "<tool_response>",
            "</tool_response>",
        ],
        "bos": None,
        "eos": "<|im_end|>",
    },
    "qwen3_coder": {
        "template": "Qwen-Qwen3-Coder.jinja",
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "added": ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"],
        "bos": None,
        "eos": "<|im_end|>",
    },
    "harmony": {
        "template": "openai-gpt-oss-120b.jinja",
        "special": [
            "<|startoftext|>",
            "<|endoftext|>",
            "<|start|>",
            "<|end|>",
            "<|message|>",
            "<|channel|>",
            "<|constrain|>",
            "<|return|>",
            "<|call|>",
        ],
        "added": [],
        "bos": "<|startoftext|>",
        "eos": "<|return|>",
    },
    "mistral": {
        "template": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        "special": [
            "<s>",
            "</s>",
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
        ],
        "added": [],
        "bos": "<s>",
        "eos": "</s>",
    },
}


def template_text(family: str) -> str:
    return (TEMPLATES / FAMILIES[family]["template"]).read_text(encoding="utf-8")


@cache
def template_tokenizer(family: str) -> Any:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    spec = FAMILIES[family]
    vocab = {char: i for i, char in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in spec["special"]])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in spec["added"]])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=spec["bos"],
        eos_token=spec["eos"],
        chat_template=template_text(family),
    )
