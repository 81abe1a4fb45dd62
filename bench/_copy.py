"""Bulk loading for the benches that seed Postgres: COPY rows of a model's table, every column the bench
does not give filled with the field's own default. A column added to a model since a bench was written (with
a default, as a migration of a live table needs) then changes nothing here, where a hand-kept column list
failed at its first COPY (`null value in column "answer"`) and nobody saw it until the bench was run."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import connection
from django.db.models import Model


def defaulted_columns(model: type[Model], given: Sequence[str]) -> list[tuple[str, object]]:
    """(column, database value) for each NOT NULL column of `model` that `given` leaves out, from the
    field's default; a required column without one is the bench's to give, and says so."""
    filled = []
    for field in model._meta.concrete_fields:
        if field.column in given or field.null or field.primary_key:
            continue
        value = field.get_default()
        if value is None:
            raise SystemExit(
                f"{model.__name__}.{field.name} has no default: the bench must give column {field.column!r}"
            )
        filled.append((field.column, field.get_db_prep_save(value, connection)))
    return filled


def copy_rows(model: type[Model] | str, columns: Sequence[str], rows: Iterable[Sequence]) -> int:
    """COPY `rows` (tuples in the order of `columns`) into `model`'s table (or a plain table by name)."""
    table = model if isinstance(model, str) else model._meta.db_table
    extra = [] if isinstance(model, str) else defaulted_columns(model, columns)
    names = [*columns, *(column for column, _ in extra)]
    tail = tuple(value for _, value in extra)
    quoted = ", ".join(connection.ops.quote_name(name) for name in names)
    n = 0
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {table} ({quoted}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row((*row, *tail))
                n += 1
    return n
