"""The environment's own verdict per trajectory (`correct`): the truth the reward-hacking alarm and the
judge check compare a judge's scores with (trainers/rubrics/alarms.py, trainers/rubrics/judge_check.py)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("rollouts", "0020_num_turns_counts_model_turns")]

    operations = [
        migrations.AddField(
            model_name="trajectory",
            name="correct",
            field=models.BooleanField(
                blank=True, help_text="the environment's own verdict on the answer (null: it gave none)", null=True
            ),
        ),
    ]
