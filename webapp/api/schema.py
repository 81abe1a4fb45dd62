"""OpenAPI generation: how drf-spectacular documents our token authentications, and the error answers
every operation can give, so that the document lists each status code the API really sends (a
schemathesis run in the test suite checks every answer against it)."""

from __future__ import annotations

from typing import Any

from django import forms
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework.permissions import AllowAny

from trainers.sdk.wire import INT64_MAX
from webapp.api import serializers as s


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "webapp.accounts.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token (`rsu_…`, created at POST /api/tokens/ or POST "
            "/api/auth/token/): `Authorization: Bearer rsu_…`.",
        }


BAD_REQUEST = OpenApiResponse(
    s.BadRequestSerializer,
    description="invalid input (`validation_failed`, with `fields` by dotted path) or a body that is not "
    "JSON (`malformed_json`)",
)
NOT_AUTHENTICATED = OpenApiResponse(
    s.ErrorSerializer,
    description="no credentials (`not_authenticated`), or a wrong, revoked or run token "
    "(`authentication_failed`)",
)
FORBIDDEN = OpenApiResponse(
    s.ErrorSerializer,
    description="your role does not allow this (`forbidden`), or a session write without its CSRF token "
    "(`permission_denied`)",
)
NOT_FOUND = OpenApiResponse(
    s.ErrorSerializer, description="no such object, or you are not a member of its project"
)
BODY_TOO_LARGE = OpenApiResponse(
    s.BodyTooLargeSerializer, description="the body is larger than `API_MAX_BODY_BYTES` (`max_bytes`)"
)
UNSUPPORTED_MEDIA_TYPE = OpenApiResponse(s.ErrorSerializer, description="the body is not `application/json`")


class ApiAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema, plus the error answers an operation can give and does not list."""

    def _standard_errors(self) -> dict[str, OpenApiResponse]:
        authenticated = not any(isinstance(p, AllowAny) for p in self.view.get_permissions())
        has_body = self._get_request_body() is not None
        has_query = any(p.get("in") == "query" for p in self._get_parameters())
        has_path_parameters = "{" in self.path
        errors: dict[str, OpenApiResponse] = {}
        if has_body or has_query:
            errors["400"] = BAD_REQUEST
        if authenticated:
            errors["401"] = NOT_AUTHENTICATED
            if has_path_parameters or self.method not in ("GET", "HEAD", "OPTIONS"):
                errors["403"] = FORBIDDEN
            if has_path_parameters:
                errors["404"] = NOT_FOUND
        if has_body:
            errors["413"] = BODY_TOO_LARGE
            errors["415"] = UNSUPPORTED_MEDIA_TYPE
        return errors

    def _get_response_bodies(self, direction: str = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        for code, response in self._standard_errors().items():
            if code not in responses:
                responses[code] = self._get_response_for_code(response, code, direction=direction)
        return responses


def _form_field_schema(field: forms.Field) -> dict[str, Any]:
    """The JSON schema of one query parameter validated by a Django form field."""
    many = isinstance(field, forms.MultipleChoiceField)
    coerce = getattr(field, "coerce", None)
    if isinstance(field, forms.FloatField):  # before IntegerField: FloatField is one
        schema: dict[str, Any] = {"type": "number"}
    elif isinstance(field, forms.IntegerField):
        schema = {"type": "integer"}
        if field.min_value is not None:
            schema["minimum"] = field.min_value
        if field.max_value is not None:
            schema["maximum"] = field.max_value
    elif isinstance(field, forms.ChoiceField):
        values = [str(value) for value, _label in field.choices if value != ""]
        if coerce is int:
            schema = {"type": "integer"}
            if values:  # choices fixed in the class (those filled per project are not listed)
                schema["enum"] = [int(value) for value in values]
        else:
            schema = {"type": "string", "enum": values} if values else {"type": "string"}
    else:
        schema = {"type": "string"}
        if getattr(field, "max_length", None):
            schema["maxLength"] = field.max_length
    return {"type": "array", "items": schema} if many else schema


def form_parameters(form_class: type[forms.Form], descriptions: dict[str, str]) -> list[OpenApiParameter]:
    """Query parameters documented from the form that validates them (a page's filters reused by the API)."""
    return [
        OpenApiParameter(
            name,
            _form_field_schema(field),
            description=descriptions.get(name, str(field.label or "")),
            explode=True if isinstance(field, forms.MultipleChoiceField) else None,
        )
        for name, field in form_class.base_fields.items()
    ]


def _any_or_null(schema: Any) -> Any:
    """drf-spectacular writes a nullable free-form JSON field as `oneOf: [{}, {type: null}]` under OpenAPI
    3.1, which no value satisfies (null matches both); `{}` already allows null."""
    if isinstance(schema, dict):
        one_of = schema.get("oneOf")
        if isinstance(one_of, list) and len(one_of) == 2 and {} in one_of and {"type": "null"} in one_of:
            schema = {key: value for key, value in schema.items() if key != "oneOf"}
        return {key: _any_or_null(value) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_any_or_null(item) for item in schema]
    return schema


def _bound_path_ids(document: dict[str, Any]) -> None:
    """`<int:…>` path segments: ids, non-negative, of a 64-bit column (a larger one names nothing: 404)."""
    for item in document.get("paths", {}).values():
        for operation in item.values():
            for parameter in operation.get("parameters", []) if isinstance(operation, dict) else []:
                if parameter.get("in") == "path" and parameter["schema"].get("type") == "integer":
                    parameter["schema"].update(minimum=0, maximum=INT64_MAX)


def postprocess_document(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    result = _any_or_null(result)
    _bound_path_ids(result)
    return result


# --- the limits table of docs/api.md (a test keeps the two equal) ------------------------------------


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else str(value)


def _limits_words(document: dict[str, Any], schema: dict[str, Any]) -> str:
    schema = _resolve(document, schema)
    if "allOf" in schema and len(schema["allOf"]) == 1:
        schema = _resolve(document, schema["allOf"][0])
    kind = schema.get("type", "any JSON")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    words = [{"array": "list", "object": "object", "number": "number", "integer": "integer"}.get(kind, kind)]
    if "enum" in schema:
        values = [str(v) for v in schema["enum"] if v not in ("", None)]
        words = (
            [" \\| ".join(f"`{v}`" for v in values)] if len(values) <= 12 else [f"one of {len(values)} names"]
        )
    if "minimum" in schema or "maximum" in schema:
        low = _number(schema["minimum"]) if "minimum" in schema else "…"
        high = _number(schema["maximum"]) if "maximum" in schema else "…"
        words.append(f"{low} – {high}")
    if "exclusiveMinimum" in schema:
        words.append(f"> {_number(schema['exclusiveMinimum'])}")
    if ("minLength" in schema or "maxLength" in schema) and "enum" not in schema:
        words.append(
            f"{schema.get('minLength', 0)} – {_number(schema.get('maxLength', 0))} characters"
            if "maxLength" in schema
            else f"at least {schema['minLength']} characters"
        )
    if "minItems" in schema or "maxItems" in schema:
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        words.append(f"{low} – {_number(high)} items" if high is not None else f"at least {low} items")
    if kind == "array" and "items" in schema:
        items = _resolve(document, schema["items"])
        if "enum" in items or items.get("type") in ("integer", "number", "string"):
            words.append("of " + _limits_words(document, items))
    return ", ".join(words)


def limits_markdown(document: dict[str, Any]) -> str:
    """Every input of every operation with its type and limits, as docs/api.md's "Limits" table: what the
    OpenAPI document states, which is what the serializers enforce."""
    lines = ["| operation | field | in | required | type and limits |", "|---|---|---|---|---|"]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            name = f"`{method.upper()} {path}`"
            for parameter in operation.get("parameters", []):
                if (
                    parameter["in"] == "path"
                    and parameter["schema"].get("type") == "string"
                    and "maximum" not in parameter["schema"]
                ):
                    continue  # slugs and tag names: any path segment
                lines.append(
                    f"| {name} | `{parameter['name']}` | {parameter['in']} | "
                    f"{'yes' if parameter.get('required') else 'no'} | {_limits_words(document, parameter['schema'])} |"
                )
            body = (
                operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            )
            if body:
                body = _resolve(document, body)
                required = set(body.get("required", []))
                for field, schema in body.get("properties", {}).items():
                    if schema.get("readOnly"):
                        continue
                    lines.append(
                        f"| {name} | `{field}` | body | {'yes' if field in required else 'no'} | "
                        f"{_limits_words(document, schema)} |"
                    )
    return "\n".join(lines)
