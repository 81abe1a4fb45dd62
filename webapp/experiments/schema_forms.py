"""Django forms generated from JSON schemas: environment configs, criterion params, run knobs.

The schema stays the one source of truth for what is valid. A generated form only turns what the
browser posts into JSON values (text → int, checkboxes → list…); the rules (minimum, enum, required,
pattern) are checked by the service through `trainers.registry.validate_config`, and its errors
come back here to be shown next to the field they concern (`add_schema_errors`).

How a property becomes a field:
- integer / number → a number input (min/max as HTML hints; step "any" for numbers)
- string with enum → a select; other strings → a text input (a textarea past 2000 characters
  or when the default spans lines)
- boolean → a checkbox
- array whose items are an enum → checkboxes (multiple choice)
- object with `properties` → its properties, flattened one level down as `parent__child`
- anything else (free-form objects, arrays of arrays, …) → a JSON textarea
- `title` → label, `description` → help text, `default` → the initial value.
An empty input leaves the key out (the kind's default applies); for a nullable type it means null.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django import forms
from django.forms import BoundField

# Joins a nested property's name to its parent's in field names: `lora__r` holds config["lora"]["r"].
NESTED_SEPARATOR = "__"


def _types(prop: Mapping[str, Any]) -> tuple[set[str], bool]:
    """The property's JSON types without "null", and whether null is allowed."""
    declared = prop.get("type", [])
    types = {declared} if isinstance(declared, str) else set(declared)
    nullable = "null" in types
    types.discard("null")
    return types, nullable


def _label(key: str, prop: Mapping[str, Any]) -> str:
    return prop.get("title") or key.replace("_", " ").capitalize()


def _enum_items(prop: Mapping[str, Any]) -> list[Any] | None:
    items = prop.get("items")
    if isinstance(items, Mapping) and isinstance(items.get("enum"), list):
        return list(items["enum"])
    return None


class _JsonValueField(forms.JSONField):
    """A JSON textarea that says what went wrong when the text is not JSON."""

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except forms.ValidationError:
            try:
                json.loads(value)
            except json.JSONDecodeError as exc:
                raise forms.ValidationError(
                    f"Not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
                ) from None
            raise


class _EnumListField(forms.MultipleChoiceField):
    """Checkboxes for an array of enum values; the result keeps the schema's order of options."""

    def clean(self, value: Any) -> list[Any]:
        chosen = set(super().clean(value) or [])
        return [option for option, _label in self.choices if option in chosen]


def field_for_property(key: str, prop: Mapping[str, Any]) -> forms.Field:
    """A form field for one schema property that is not a nested object."""
    types, nullable = _types(prop)
    common: dict[str, Any] = {
        "label": _label(key, prop),
        "help_text": prop.get("description", ""),
        "required": False,
    }
    enum = prop.get("enum")
    if types == {"boolean"}:
        return forms.BooleanField(**common)
    if types in ({"integer"}, {"number"}):
        attrs: dict[str, Any] = {"step": "1" if types == {"integer"} else "any"}
        for bound in ("minimum", "exclusiveMinimum"):
            if bound in prop:
                attrs["min"] = prop[bound]
                break
        for bound in ("maximum", "exclusiveMaximum"):
            if bound in prop:
                attrs["max"] = prop[bound]
                break
        field_class = forms.IntegerField if types == {"integer"} else forms.FloatField
        return field_class(widget=forms.NumberInput(attrs=attrs), **common)
    if types == {"string"} and isinstance(enum, list):
        choices = [(value, value) for value in enum]
        if nullable:
            choices.insert(0, ("", "—"))
        return forms.ChoiceField(choices=choices, **common)
    if types == {"string"}:
        default = prop.get("default")
        long_text = prop.get("maxLength", 0) > 2000 or (isinstance(default, str) and "\n" in default)
        widget = forms.Textarea(attrs={"rows": 6}) if long_text else forms.TextInput()
        if "maxLength" in prop:
            widget.attrs["maxlength"] = prop["maxLength"]
        return forms.CharField(widget=widget, strip=False, **common)
    if types == {"array"} and (options := _enum_items(prop)) is not None:
        return _EnumListField(
            choices=[(value, value) for value in options], widget=forms.CheckboxSelectMultiple, **common
        )
    return _JsonValueField(widget=forms.Textarea(attrs={"rows": 3, "class": "json"}), **common)


def _is_nested_object(prop: Mapping[str, Any]) -> bool:
    types, nullable = _types(prop)
    return (
        types == {"object"}
        and not nullable
        and isinstance(prop.get("properties"), Mapping)
        and bool(prop["properties"])
    )


@dataclass(frozen=True)
class SchemaField:
    """Where a generated field's value lives in the config, and what its schema says about it."""

    name: str  # the form field name, e.g. "lora__r"
    path: tuple[str, ...]  # e.g. ("lora", "r")
    prop: Mapping[str, Any]
    group: str


def schema_fields(
    schema: Mapping[str, Any], *, exclude: Iterable[str] = (), _path: tuple[str, ...] = (), _group: str = ""
) -> list[SchemaField]:
    """The schema's properties as form fields, in schema order, nested objects flattened."""
    found: list[SchemaField] = []
    excluded = set(exclude)
    for key, prop in (schema.get("properties") or {}).items():
        if key in excluded and not _path:
            continue
        path = (*_path, key)
        group = prop.get("x-group", _group)
        if _is_nested_object(prop):
            found.extend(schema_fields(prop, _path=path, _group=group))
        else:
            found.append(SchemaField(NESTED_SEPARATOR.join(path), path, prop, group))
    return found


def _get_path(values: Mapping[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    current: Any = values
    for key in path:
        if not isinstance(current, Mapping) or key not in current:
            return False, None
        current = current[key]
    return True, current


def _set_path(values: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    current = values
    for key in path[:-1]:
        current = current.setdefault(key, {})
    current[path[-1]] = value


class SchemaForm(forms.Form):
    """A form generated from a JSON schema; `values()` gives the config the user typed.

    `values` (a config) prefills the form; properties it lacks show the schema's default.
    """

    def __init__(
        self,
        schema: Mapping[str, Any],
        data: Mapping[str, Any] | None = None,
        *,
        values: Mapping[str, Any] | None = None,
        prefix: str | None = None,
        exclude: Iterable[str] = (),
    ) -> None:
        self.schema = schema
        self.schema_fields = schema_fields(schema, exclude=exclude)
        initial: dict[str, Any] = {}
        for spec in self.schema_fields:
            present, value = _get_path(values or {}, spec.path)
            if not present:
                present, value = "default" in spec.prop, spec.prop.get("default")
            if present:
                initial[spec.name] = value
        super().__init__(data=data, initial=initial, prefix=prefix)
        for spec in self.schema_fields:
            self.fields[spec.name] = field_for_property(spec.path[-1], spec.prop)

    def values(self) -> dict[str, Any]:
        """The config as JSON values. Call after is_valid(). Empty inputs are left out (or null)."""
        config: dict[str, Any] = {}
        for spec in self.schema_fields:
            value = self.cleaned_data.get(spec.name)
            if value is None or value == "":
                if not _types(spec.prop)[1]:
                    continue  # the kind's default applies; a required one is reported by the schema
                value = None
            _set_path(config, spec.path, value)
        return config

    def field_for_path(self, path: str) -> str | None:
        """The field showing the value at a dotted config path ("lora.r" → "lora__r", "operations.0" →
        "operations"), or None when no field shows it."""
        parts = [p for p in path.split(".") if p]
        for length in range(len(parts), 0, -1):
            name = NESTED_SEPARATOR.join(parts[:length])
            if name in self.fields:
                return name
        return None

    def add_schema_errors(self, errors: Mapping[str, list[str]]) -> None:
        """Show validation errors keyed by dotted config path next to their fields."""
        for path, messages in errors.items():
            name = self.field_for_path(path)
            if name is None:
                prefix = f"{path}: " if path else ""
                self.add_error(None, [prefix + message for message in messages])
            else:
                self.add_error(name, list(messages))

    def groups(self, titles: Mapping[str, str]) -> list[tuple[str, list[BoundField]]]:
        """Bound fields by their schema `x-group`, in the order of `titles` (others last)."""
        by_group: dict[str, list[BoundField]] = {}
        for spec in self.schema_fields:
            by_group.setdefault(spec.group, []).append(self[spec.name])
        ordered = [(titles[key], by_group.pop(key)) for key in titles if key in by_group]
        ordered += [
            (key.replace("_", " ").capitalize() or "Other", fields) for key, fields in by_group.items()
        ]
        return ordered

    def flat_values(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The config's values keyed by this form's field names (for embedding in a page's JS)."""
        flat: dict[str, Any] = {}
        for spec in self.schema_fields:
            present, value = _get_path(config, spec.path)
            if present:
                flat[self.add_prefix(spec.name)] = value
        return flat
