"""Read a rendered form the way a browser submits it, so page tests post what a user would.

`form_data(html, form_id)` returns {name: [values]} for the successful controls of one form:
text-like inputs, checked checkboxes and radios, selected options (the first option when none is
marked), textareas. Controls inside <template> are not part of the form, as in a browser.
"""

from __future__ import annotations

import re
from html import unescape
from html.parser import HTMLParser

_TEXT_LIKE = {"text", "number", "hidden", "password", "email", "search", "url", ""}


class _FormReader(HTMLParser):
    def __init__(self, form_id: str | None) -> None:
        super().__init__(convert_charrefs=True)
        self.form_id = form_id
        self.in_form = False
        self.template_depth = 0
        self.data: dict[str, list[str]] = {}
        self._select: tuple[str, bool] | None = None  # (name, multiple)
        self._select_options: list[tuple[str, bool]] = []
        self._option: dict | None = None
        self._textarea: str | None = None
        self._textarea_text: list[str] = []
        self.found = False

    def _add(self, name: str, value: str) -> None:
        self.data.setdefault(name, []).append(value)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: (v if v is not None else "") for k, v in attrs}
        if tag == "form" and (self.form_id is None or a.get("id") == self.form_id) and not self.found:
            self.in_form, self.found = True, True
            return
        if tag == "template":
            self.template_depth += 1
        if not self.in_form or self.template_depth or "disabled" in a:
            return
        name = a.get("name")
        if tag == "input" and name:
            kind = a.get("type", "text").lower()
            if kind in _TEXT_LIKE:
                self._add(name, a.get("value", ""))
            elif kind in ("checkbox", "radio") and "checked" in a:
                self._add(name, a.get("value", "on"))
        elif tag == "select" and name:
            self._select = (name, "multiple" in a)
            self._select_options = []
        elif tag == "option" and self._select:
            self._option = {"value": a.get("value"), "selected": "selected" in a, "text": []}
        elif tag == "textarea" and name:
            self._textarea, self._textarea_text = name, []

    def handle_data(self, data: str) -> None:
        if self._option is not None:
            self._option["text"].append(data)
        if self._textarea is not None:
            self._textarea_text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "template" and self.template_depth:
            self.template_depth -= 1
        elif tag == "form" and self.in_form and not self.template_depth:
            self.in_form = False
        elif tag == "option" and self._option is not None:
            value = self._option["value"]
            if value is None:
                value = "".join(self._option["text"]).strip()
            self._select_options.append((value, self._option["selected"]))
            self._option = None
        elif tag == "select" and self._select:
            name, multiple = self._select
            chosen = [v for v, selected in self._select_options if selected]
            if not chosen and not multiple and self._select_options:
                chosen = [self._select_options[0][0]]
            for value in chosen if multiple else chosen[-1:]:
                self._add(name, value)
            self._select = None
        elif tag == "textarea" and self._textarea is not None:
            text = "".join(self._textarea_text)
            self._add(self._textarea, text[1:] if text.startswith("\n") else text)
            self._textarea = None


def form_data(html: str | bytes, form_id: str | None = None) -> dict[str, list[str]]:
    """What submitting the form (the first one, or the one with this id) would post."""
    reader = _FormReader(form_id)
    reader.feed(html.decode() if isinstance(html, bytes) else html)
    if not reader.found:
        raise AssertionError(f"no form {form_id or ''} on the page")
    return reader.data


def flat(data: dict[str, list[str]]) -> dict[str, str | list[str]]:
    """Single values unwrapped, for readable edits in tests (the test client posts lists as repeats)."""
    return {k: v[0] if len(v) == 1 else v for k, v in data.items()}


def field_block(html: str | bytes, name: str) -> str:
    """The rendered block of one form field (templates/experiments/_field.html marks it data-field)."""
    text = html.decode() if isinstance(html, bytes) else html
    marker = f'data-field="{name}"'
    start = text.find(marker)
    if start < 0:
        raise AssertionError(f"no field {name!r} on the page")
    end = text.find('data-field="', start + len(marker))
    return text[start : end if end > 0 else len(text)]


def field_errors(html: str | bytes, name: str) -> list[str]:
    """The error messages shown next to one field."""
    block = field_block(html, name)
    found = re.search(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', block, re.S)
    return [unescape(item) for item in re.findall(r"<li>(.*?)</li>", found.group(1), re.S)] if found else []


def page_errors(html: str | bytes) -> list[str]:
    """Every error message on the page (field and form errors)."""
    text = html.decode() if isinstance(html, bytes) else html
    lists = re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', text, re.S)
    return [unescape(item) for block in lists for item in re.findall(r"<li>(.*?)</li>", block, re.S)]
