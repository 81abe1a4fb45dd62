"""Hooks that report other trainers' runs to Rollout Studio (each imports its library lazily:
`trainers.integrations.trl` needs transformers; nothing here is imported by `trainers.sdk`)."""
