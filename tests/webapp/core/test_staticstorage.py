"""In production the run page's ES modules name each other by their hashed names: the entry a browser
caches for a year never pairs with a stale panel module after a deploy (webapp/core/staticstorage.py)."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from django.core.files.storage import FileSystemStorage

from webapp.core.staticstorage import StaticStorage

ROOT = Path(__file__).resolve().parents[3]
IMPORT = re.compile(r"""\bfrom\s*["'](\.{1,2}/[^"']+)["']""")


def collect_js(target: Path) -> StaticStorage:
    """What collectstatic does with static/js/: copy, then hash and rewrite (post_process)."""
    source = FileSystemStorage(location=ROOT / "static")
    storage = StaticStorage(location=target, base_url="/static/")
    paths = {}
    for path in sorted((ROOT / "static" / "js").rglob("*.js")):
        name = path.relative_to(ROOT / "static").as_posix()
        with source.open(name) as original:
            storage.save(name, original)
        paths[name] = (source, name)
    problems = [
        (name, error) for name, _, error in storage.post_process(paths) if isinstance(error, Exception)
    ]
    assert problems == []
    return storage


def test_the_hashed_entry_imports_the_hashed_panels_all_the_way_down(tmp_path):
    storage = collect_js(tmp_path)
    entry = storage.stored_name("js/run_live.js")
    assert entry != "js/run_live.js"
    seen, todo = set(), [entry]
    while todo:
        hashed = todo.pop()
        if hashed in seen:
            continue
        seen.add(hashed)
        content = (tmp_path / hashed).read_text()
        for url in IMPORT.findall(content):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(hashed), url))  # "../when.js" too
            original = re.sub(r"\.[0-9a-f]{12}\.js$", ".js", target)
            assert original != target, f"{hashed} imports {url} by its plain name"
            assert storage.stored_name(original) == target  # the current hash, not a stale one
            assert (tmp_path / target).is_file()
            todo.append(target)
    panels = {re.sub(r"\.[0-9a-f]{12}\.js$", ".js", name) for name in seen}
    assert {"js/run/curves.js", "js/run/state.js", "js/run/async_health.js"} <= panels
    # Every module of static/js/run/ is reachable from the entry (no orphan file ships unused), and the
    # page-wide times module (static/js/when.js, which base.html loads by the same hashed name) is shared.
    assert panels == {"js/run_live.js", "js/when.js"} | {
        path.relative_to(ROOT / "static").as_posix() for path in (ROOT / "static/js/run").glob("*.js")
    }
