"""A reward function the custom_python criterion tests resolve by dotted path."""

from trainers.types import Trajectory


def length_bonus(trajectory: Trajectory, per_char: float = 1.0) -> tuple[float, str]:
    return per_char * len(trajectory.final_answer), f"{len(trajectory.final_answer)} characters"
