"""Per-token statistics of a model turn (trainers.sdk.wire.TOKEN_STATS), packed as the wire sends them."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("rollouts", "0016_trajectory_env_reward_and_answer")]

    operations = [
        migrations.AddField(
            model_name="turn",
            name="token_stats",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
