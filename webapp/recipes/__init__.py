"""What the run page shows of the recipes that are more than a loss (trainers/recipes/): Training-Free
GRPO's experience library per step (`ExperienceLibraryStep`), fed by the run's `experience` events."""
