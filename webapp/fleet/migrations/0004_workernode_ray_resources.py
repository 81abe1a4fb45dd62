"""The Ray cluster a worker runs on, as it reports it: the launch check refuses a run no cluster can hold."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("fleet", "0003_worker_judge_models")]

    operations = [
        migrations.AddField(
            model_name="workernode",
            name="ray_resources",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="the Ray cluster it runs on, as Ray counts it ({'CPU': 8.0, 'GPU': 1.0, …}: the cluster at "
                "ray_address, or this machine's for a local Ray); {} when unknown (workers.node.ray_resources)",
            ),
        ),
    ]
