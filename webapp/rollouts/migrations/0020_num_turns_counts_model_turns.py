"""Trajectory.num_turns counts the model's turns (trainers.types.model_turns: assistant messages), the number
`max_turns` bounds and the run's `turns` metric reports; it counted every message before. Recounted from the
stored turns in one UPDATE."""

from django.db import migrations
from django.db.models import Count, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce


def recount(apps, schema_editor):
    Trajectory = apps.get_model("rollouts", "Trajectory")
    Turn = apps.get_model("rollouts", "Turn")
    assistant = (
        Turn.objects.filter(trajectory=OuterRef("pk"), role="assistant")
        .order_by()
        .values("trajectory")
        .annotate(n=Count("pk"))
        .values("n")
    )
    Trajectory.objects.update(num_turns=Coalesce(Subquery(assistant, output_field=IntegerField()), Value(0)))


class Migration(migrations.Migration):
    dependencies = [("rollouts", "0019_sqlite_explorer_indexes")]

    operations = [migrations.RunPython(recount, migrations.RunPython.noop)]
