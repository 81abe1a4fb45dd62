from django.db import migrations, models
from django.db.models import Count, Max


def renumber_repeated_samples(apps, schema_editor):
    """Before the uniqueness constraint: a (split, group, sample) reported twice in one step (ingestion
    used to accept that) keeps its first trajectory; the others move to new sample numbers after the
    group's last, so nothing is lost."""
    Trajectory = apps.get_model("rollouts", "Trajectory")
    repeated = (
        Trajectory.objects.values("run_id", "step", "group_index", "sample_index", "split")
        .annotate(n=Count("id")).filter(n__gt=1).order_by()
    )
    for key in repeated:
        key.pop("n")
        group = Trajectory.objects.filter(run_id=key["run_id"], step=key["step"], group_index=key["group_index"],
                                          split=key["split"])
        next_sample = group.aggregate(last=Max("sample_index"))["last"] + 1
        for pk in Trajectory.objects.filter(**key).order_by("id").values_list("pk", flat=True)[1:]:
            Trajectory.objects.filter(pk=pk).update(sample_index=next_sample)
            next_sample += 1


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0002_run_external_origin'),
        ('rollouts', '0010_explorer_search_tags_as_words'),
    ]

    operations = [
        migrations.AddField(
            model_name='trajectory',
            name='dropped',
            field=models.BooleanField(default=False, help_text='generated but not trained on (dynamic sampling)'),
        ),
        migrations.AlterField(
            model_name='trajectory',
            name='seed',
            field=models.BigIntegerField(blank=True, help_text='the environment seed; null when not reported', null=True),
        ),
        migrations.RunPython(renumber_repeated_samples, migrations.RunPython.noop),
    ]
