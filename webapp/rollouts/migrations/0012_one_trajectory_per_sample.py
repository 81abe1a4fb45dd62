"""The uniqueness of (run, step, group, sample, split), in its own migration: on Postgres it runs in a
transaction of its own, after 0011 renumbered any repeats."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("rollouts", "0011_trajectory_seed_null_dropped"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="trajectory",
            name="traj_run_step_group",
        ),
        migrations.AddConstraint(
            model_name='trajectory',
            constraint=models.UniqueConstraint(fields=('run', 'step', 'group_index', 'sample_index', 'split'), name='one_trajectory_per_sample'),
        ),
    ]
