"""Preference-data text of a stored trajectory: the one rendering lives in `trainers.texts`, shared with
the `learned_reward` criterion that scores with a model trained on it (re-exported for the review app)."""

from trainers.texts import TrajectoryText, trajectory_text

__all__ = ["TrajectoryText", "trajectory_text"]
