"""Postgres search documents index the words inside angle brackets.

Postgres's text parser reads "<answer>", "<tool_call>" or "<think>" as HTML tags and drops them, so a
search for tool_call found nothing in transcripts full of them. Documents are now built from the text
with "<" read as a space (webapp.rollouts.search.tsvector_sql); this rebuilds the existing ones from
their stored prompt and turns. SQLite's FTS5 tokenizer always split on "<": nothing to do there.
"""

from django.db import migrations

REBUILD = """
    UPDATE rollouts_trajectorysearch AS s
    SET document = to_tsvector('english', translate(d.doc, '<', ' '))
    FROM (
        SELECT t.id, left(translate(concat_ws(E'\\n', t.prompt, string_agg(
                   concat_ws(E'\\n', u.text, nullif(u.tool_name, ''), u.tool_args::text, nullif(u.tool_result, '')),
                   E'\\n' ORDER BY u.index)), E'\\ue000\\ue001\\ue002', ''), 100000) AS doc
        FROM rollouts_trajectory t LEFT JOIN rollouts_turn u ON u.trajectory_id = t.id
        GROUP BY t.id, t.prompt
    ) AS d
    WHERE d.id = s.trajectory_id
"""


def rebuild(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(REBUILD)


class Migration(migrations.Migration):

    dependencies = [
        ("rollouts", "0009_explorer_lighter_writes"),
    ]

    operations = [migrations.RunPython(rebuild, migrations.RunPython.noop)]
