"""When a run last reported progress: a run that heartbeats without progress is flagged as stalled."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("experiments", "0006_run_kind_and_preference_snapshot")]

    operations = [
        migrations.AddField(model_name="run", name="progress_at", field=models.DateTimeField(blank=True, null=True)),
    ]
