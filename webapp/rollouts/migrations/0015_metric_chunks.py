"""Metric points are stored in chunks: one row per metric per ingested batch (parallel lists of steps,
values, wall times and token counts) instead of one row per point, which cost Postgres a row and an
index entry per point — most of its CPU for a metrics batch (docs/api.md, "Throughput").

`rollouts_metricpoint` becomes a view that unnests the chunks, so every reader keeps reading points.
Existing points move into chunks of up to METRIC_CHUNK_POINTS per (run, metric), in step order.
Not reversible: the old table's ids are not kept.
"""

import django.db.models.deletion
from django.db import migrations, models

import webapp.rollouts.models

CHUNK = 64  # webapp.rollouts.models.METRIC_CHUNK_POINTS when this was written

POSTGRES_VIEW = """
CREATE VIEW rollouts_metricpoint AS
SELECT c.id * 65536 + p.n AS id, c.run_id, c.key, p.step, p.value, p.wall_time, p.tokens,
    c.min_step AS chunk_min_step, c.max_step AS chunk_max_step
FROM rollouts_metricchunk c
CROSS JOIN LATERAL unnest(c.steps, c."values", c.wall_times, c.tokens)
    WITH ORDINALITY AS p(step, value, wall_time, tokens, n)
"""

# json_each over the steps gives each point's position (`key`, from 0); the other lists are read at it,
# walking the JSON text to it (which is why chunks are kept short). `->>` (SQLite 3.38+) took two thirds
# of json_extract's time; older SQLites, still shipped by some distributions, get json_extract.
SQLITE_VIEW = """
CREATE VIEW rollouts_metricpoint AS
SELECT c.id * 65536 + s.key AS id, c.run_id AS run_id, c.key AS key, s.value AS step,
    {values} AS value, {wall_times} AS wall_time, {tokens} AS tokens,
    c.min_step AS chunk_min_step, c.max_step AS chunk_max_step
FROM rollouts_metricchunk c, json_each(c.steps) AS s
"""


def sqlite_view(version: tuple[int, ...]) -> str:
    if version >= (3, 38):
        read = 'c."{}" ->> s.key'
    else:
        read = """json_extract(c."{}", '$[' || s.key || ']')"""
    return SQLITE_VIEW.format(**{name: read.format(name) for name in ("values", "wall_times", "tokens")})


def move_points_into_chunks(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"""
                INSERT INTO rollouts_metricchunk
                    (run_id, key, size, min_step, max_step, steps, "values", wall_times, tokens)
                SELECT run_id, key, count(*), min(step), max(step), array_agg(step ORDER BY step, id), array_agg(value ORDER BY step, id),
                       array_agg(wall_time ORDER BY step, id), array_agg(tokens ORDER BY step, id)
                FROM (SELECT *, (row_number() OVER (PARTITION BY run_id, key ORDER BY step, id) - 1) / {CHUNK} AS part
                      FROM rollouts_metricpoint_old) numbered
                GROUP BY run_id, key, part
                ORDER BY run_id, key, part
                """
            )
            return
        MetricChunk = apps.get_model("rollouts", "MetricChunk")
        cursor.execute(
            "SELECT run_id, key, step, value, wall_time, tokens FROM rollouts_metricpoint_old "
            "ORDER BY run_id, key, step, id"
        )
        chunks, current, points = [], None, []

        def flush():
            for start in range(0, len(points), CHUNK):
                part = points[start : start + CHUNK]
                chunks.append(
                    MetricChunk(
                        run_id=current[0],
                        key=current[1],
                        size=len(part),
                        min_step=min(p[0] for p in part),
                        max_step=max(p[0] for p in part),
                        steps=[p[0] for p in part],
                        values=[p[1] for p in part],
                        wall_times=[p[2] for p in part],
                        tokens=[p[3] for p in part],
                    )
                )

        for run_id, key, *point in cursor.fetchall():
            if (run_id, key) != current:
                if current is not None:
                    flush()
                current, points = (run_id, key), []
            points.append(point)
        if current is not None:
            flush()
        MetricChunk.objects.bulk_create(chunks, batch_size=500)


def replace_table_with_view(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE rollouts_metricpoint_old")
        if connection.vendor == "postgresql":
            cursor.execute(POSTGRES_VIEW)
        else:
            cursor.execute(sqlite_view(connection.Database.sqlite_version_info))


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0006_run_kind_and_preference_snapshot'),
        ('rollouts', '0014_metric_point_lighter_writes'),
    ]

    operations = [
        migrations.CreateModel(
            name='MetricChunk',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(max_length=100)),
                ('size', models.PositiveIntegerField()),
                ('min_step', models.PositiveIntegerField()),
                ('max_step', models.PositiveIntegerField()),
                ('steps', webapp.rollouts.models.NumberListField()),
                ('values', webapp.rollouts.models.NumberListField(floats=True)),
                ('wall_times', webapp.rollouts.models.NumberListField(floats=True, help_text='unix seconds when measured (None: not reported)')),
                ('tokens', webapp.rollouts.models.NumberListField(help_text='tokens seen so far, for the x-axis (None: not reported)')),
                ('run', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='metric_chunks', to='experiments.run')),
            ],
            options={
                'indexes': [models.Index(fields=['run', 'key', 'min_step'], name='metric_chunk_run_key')],
            },
        ),
        migrations.AlterModelTable(name='metricpoint', table='rollouts_metricpoint_old'),
        migrations.RunPython(move_points_into_chunks),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='MetricPoint'),
                migrations.CreateModel(
                    name='MetricPoint',
                    fields=[
                        ('id', models.BigIntegerField(primary_key=True, serialize=False)),
                        ('key', models.CharField(max_length=100)),
                        ('step', models.PositiveIntegerField()),
                        ('value', models.FloatField()),
                        ('wall_time', models.FloatField(blank=True, help_text='unix seconds when measured', null=True)),
                        ('tokens', models.BigIntegerField(blank=True, help_text='tokens seen so far, for the x-axis', null=True)),
                        ('chunk_min_step', models.PositiveIntegerField()),
                        ('chunk_max_step', models.PositiveIntegerField()),
                        ('run', models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='metric_points', to='experiments.run')),
                    ],
                    options={'db_table': 'rollouts_metricpoint', 'managed': False},
                ),
            ],
            database_operations=[migrations.RunPython(replace_table_with_view)],
        ),
    ]
