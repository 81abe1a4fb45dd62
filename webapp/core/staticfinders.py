"""Serve plotly.js from the copy inside the installed `plotly` package (no CDN, no vendored copy)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_STATIC_NAME = "plotly/plotly.min.js"


def _plotly_package_data() -> Path:
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the plotly package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "package_data"


class PlotlyFinder(BaseFinder):
    def __init__(self, *args, **kwargs):
        self.root = _plotly_package_data()
        self.storage = FileSystemStorage(location=str(self.root))
        self.storage.prefix = "plotly"

    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        if path == PLOTLY_STATIC_NAME:
            match = str(self.root / "plotly.min.js")
            return [match] if find_all else match
        return []

    def list(self, ignore_patterns):
        yield "plotly.min.js", self.storage
