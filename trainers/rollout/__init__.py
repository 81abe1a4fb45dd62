"""Sampling episodes: the episode driver and chat format (`episodes`), the generation backends
(`backends`: transformers, vLLM), tool formats (`toolformats`) and tool-call parsing (`toolcalls`).

Depends on `sdk`, `types` and `models` only; environments, rubrics and the learner build on it.
"""
