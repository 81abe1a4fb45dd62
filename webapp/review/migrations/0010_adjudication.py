from django.conf import settings
from django.db import migrations, models
import django.db.models.deletion


class Migration(migrations.Migration):

    dependencies = [
        ('review', '0009_activity_visits'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Adjudication',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('choice', models.CharField(choices=[('a', 'A is better'), ('b', 'B is better'), ('tie', 'Tie'), ('both_bad', 'Both bad')], max_length=8)),
                ('rationale', models.TextField(blank=True)),
                ('overridden', models.JSONField(default=list)),
                ('adjudicated_at', models.DateTimeField()),
                ('adjudicated_by', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('pair', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='adjudication', to='review.preferencepair')),
            ],
        ),
        migrations.AlterField(
            model_name='preferencequeue',
            name='distinct_rewards',
            field=models.BooleanField(default=True, help_text='skip pairs whose rewards are equal'),
        ),
        migrations.AlterField(
            model_name='activity',
            name='verb',
            field=models.CharField(choices=[('comment.added', 'commented on'), ('comment.edited', 'edited a comment on'), ('comment.deleted', 'deleted a comment on'), ('tag.added', 'tagged'), ('tag.removed', 'removed a tag from'), ('flag.raised', 'flagged'), ('flag.resolved', 'resolved a flag on'), ('queue.created', 'created the preference queue'), ('judgement.recorded', 'judged a pair in'), ('judgement.changed', 'changed a judgement in'), ('snapshot.created', 'exported a preference dataset from'), ('run.launched', 'launched the run'), ('run.cancelled', 'cancelled the run'), ('environment.versioned', 'saved the environment'), ('rubric.versioned', 'saved the rubric'), ('reward_model.trained', 'started training the reward model'), ('reward_model.added', 'added a learned reward to the rubric'), ('turn.judged', 'judged a turn of'), ('turn.cleared', 'withdrew a turn judgement on'), ('judge.asked', 'asked an LLM judge to annotate'), ('pair.adjudicated', 'settled a disagreement in')], max_length=24),
        ),
    ]
