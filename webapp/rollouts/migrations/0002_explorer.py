"""The explorer: full-text documents, criterion-score rows, saved views, keyset indexes.

The full-text index differs by database and is created here by hand: a GIN index over the tsvector on
Postgres; an FTS5 table over the document text on SQLite, kept in sync by triggers. Existing
trajectories are indexed (backfilled) from their stored prompt, turns and components.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import webapp.rollouts.models

FTS_TABLE = "rollouts_trajectory_fts"
POSTGRES_BACKFILL = [
    """
    INSERT INTO rollouts_trajectorysearch (trajectory_id, document)
    SELECT t.id, to_tsvector('english', left(translate(concat_ws(E'\\n', t.prompt, string_agg(
               concat_ws(E'\\n', u.text, nullif(u.tool_name, ''), u.tool_args::text, nullif(u.tool_result, '')),
               E'\\n' ORDER BY u.index)), E'\\ue000\\ue001', ''), 100000))
    FROM rollouts_trajectory t LEFT JOIN rollouts_turn u ON u.trajectory_id = t.id
    GROUP BY t.id, t.prompt
    """,
    """
    INSERT INTO rollouts_criterionscore (trajectory_id, name, raw, weighted)
    SELECT t.id, left(c->>'name', 200), (c->>'raw')::float, (c->>'weighted')::float
    FROM rollouts_trajectory t
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE WHEN jsonb_typeof(t.components) = 'array' THEN t.components ELSE '[]'::jsonb END) AS c
    WHERE jsonb_typeof(c) = 'object' AND jsonb_typeof(c->'name') = 'string'
      AND jsonb_typeof(c->'raw') = 'number' AND jsonb_typeof(c->'weighted') = 'number'
    """,
    "CREATE INDEX trajectorysearch_document_gin ON rollouts_trajectorysearch USING gin (document)",
]
SQLITE_FTS = [
    f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(document, content='rollouts_trajectorysearch', "
    "content_rowid='trajectory_id', tokenize='porter unicode61 remove_diacritics 2')",
    f"""CREATE TRIGGER rollouts_trajectorysearch_ai AFTER INSERT ON rollouts_trajectorysearch BEGIN
        INSERT INTO {FTS_TABLE} (rowid, document) VALUES (new.trajectory_id, new.document); END""",
    f"""CREATE TRIGGER rollouts_trajectorysearch_ad AFTER DELETE ON rollouts_trajectorysearch BEGIN
        INSERT INTO {FTS_TABLE} ({FTS_TABLE}, rowid, document) VALUES ('delete', old.trajectory_id, old.document); END""",
    f"""CREATE TRIGGER rollouts_trajectorysearch_au AFTER UPDATE ON rollouts_trajectorysearch BEGIN
        INSERT INTO {FTS_TABLE} ({FTS_TABLE}, rowid, document) VALUES ('delete', old.trajectory_id, old.document);
        INSERT INTO {FTS_TABLE} (rowid, document) VALUES (new.trajectory_id, new.document); END""",
]


def create_search_index(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        for statement in POSTGRES_BACKFILL:
            schema_editor.execute(statement)
    elif vendor == "sqlite":
        for statement in SQLITE_FTS:
            schema_editor.execute(statement)
        _backfill_in_python(apps, schema_editor)
    else:
        raise NotImplementedError(f"full-text search is built for Postgres and SQLite, not {vendor}")


def _backfill_in_python(apps, schema_editor):
    from webapp.rollouts.search import document_text

    Trajectory = apps.get_model("rollouts", "Trajectory")
    Turn = apps.get_model("rollouts", "Turn")
    CriterionScore = apps.get_model("rollouts", "CriterionScore")
    TrajectorySearch = apps.get_model("rollouts", "TrajectorySearch")
    for trajectory in Trajectory.objects.only("pk", "prompt", "components").iterator():
        turns = Turn.objects.filter(trajectory_id=trajectory.pk).order_by("index").values(
            "text", "tool_name", "tool_args", "tool_result")
        TrajectorySearch.objects.create(trajectory_id=trajectory.pk, document=document_text(trajectory.prompt, turns))
        CriterionScore.objects.bulk_create([
            CriterionScore(trajectory_id=trajectory.pk, name=c["name"][:200], raw=c["raw"], weighted=c["weighted"])
            for c in trajectory.components if isinstance(c, dict) and isinstance(c.get("name"), str)
            and all(isinstance(c.get(k), (int, float)) and not isinstance(c.get(k), bool) for k in ("raw", "weighted"))
        ])


def drop_search_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS trajectorysearch_document_gin")
    elif schema_editor.connection.vendor == "sqlite":
        for trigger in ("ai", "ad", "au"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS rollouts_trajectorysearch_{trigger}")
        schema_editor.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0002_run_external_origin'),
        ('projects', '0001_initial'),
        ('rollouts', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='CriterionScore',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=200)),
                ('raw', models.FloatField()),
                ('weighted', models.FloatField()),
            ],
        ),
        migrations.CreateModel(
            name='SavedView',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=100)),
                ('query', models.CharField(blank=True, help_text="the explorer's query string, without a cursor", max_length=2000)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'ordering': ['name'],
            },
        ),
        migrations.CreateModel(
            name='TrajectorySearch',
            fields=[
                ('trajectory', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='search', serialize=False, to='rollouts.trajectory')),
                ('document', webapp.rollouts.models.SearchDocumentField()),
            ],
        ),
        migrations.AddIndex(
            model_name='trajectory',
            index=models.Index(fields=['run', 'id'], name='traj_run_id'),
        ),
        migrations.AddIndex(
            model_name='trajectory',
            index=models.Index(fields=['reward', 'id'], name='traj_reward_id'),
        ),
        migrations.AddIndex(
            model_name='trajectory',
            index=models.Index(fields=['step', 'id'], name='traj_step_id'),
        ),
        migrations.AddField(
            model_name='criterionscore',
            name='trajectory',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='criterion_scores', to='rollouts.trajectory'),
        ),
        migrations.AddField(
            model_name='savedview',
            name='project',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='saved_views', to='projects.project'),
        ),
        migrations.AddField(
            model_name='savedview',
            name='user',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='saved_views', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddIndex(
            model_name='criterionscore',
            index=models.Index(fields=['name', 'raw', 'trajectory'], name='criterion_name_raw'),
        ),
        migrations.AddIndex(
            model_name='criterionscore',
            index=models.Index(fields=['name', 'weighted', 'trajectory'], name='criterion_name_weighted'),
        ),
        migrations.AddConstraint(
            model_name='savedview',
            constraint=models.UniqueConstraint(fields=('project', 'user', 'name'), name='one_saved_view_name_per_user'),
        ),
        migrations.RunPython(create_search_index, drop_search_index),
    ]
