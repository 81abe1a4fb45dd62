"""Run.best_reward_step: the step whose mean training reward is the run's best, so every page can say where
the best reward was reached. Runs ingested before keep null: their pages show the value alone."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("experiments", "0011_run_peak_memory")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="best_reward_step",
            field=models.PositiveIntegerField(blank=True, help_text="the step that reached it", null=True),
        ),
    ]
