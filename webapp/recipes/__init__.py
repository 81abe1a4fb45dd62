"""What the run page shows of the recipes that are more than a loss (trainers/recipes/): Training-Free
GRPO's experience library per step (`ExperienceLibraryStep`) and the curriculum's task pool per step
(`TaskPoolStep`), fed by the run's `experience` and `task_pool` events."""
