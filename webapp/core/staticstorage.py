"""Production static files: WhiteNoise's hashed, compressed copies, with the run page's ES modules' imports
rewritten to the hashed names too.

The run page's script is ES modules (static/js/run_live.js importing static/js/run/*.js, no bundler).
A browser fetches what an `import … from "./run/feed.js"` names, so in production the entry (served under
its hashed name, cached for a year) must name the hashed modules, or a deploy could pair a new entry with a
stale module. Django can rewrite imports (`support_js_module_import_aggregation`) but then scans every
.js file, minified plotly.js and htmx included, where a match that names no file fails collectstatic;
here only our own module files are rewritten, with a pattern for the one import form they use.
"""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage

# Our ES module files (static/js/): the entry and its panels. A new module directory is added here.
ES_MODULES = ("js/run_live.js", "js/run/*.js")

# `import { a, b } from "./x.js";` (one line or several) and `export … from "./x.js"`: the quoted relative
# path after `from`.
IMPORT_FROM = (r"""(?P<matched>\bfrom\s*["'](?P<url>\.{1,2}/[^"'\s]+)["'])""", 'from "%(url)s"')


class StaticStorage(CompressedManifestStaticFilesStorage):
    patterns = CompressedManifestStaticFilesStorage.patterns + tuple(
        (glob, (IMPORT_FROM,)) for glob in ES_MODULES
    )
    # A module's hash depends on the hashes of what it imports: each pass settles one more level of the
    # import chain (entry → events → curves → chart_axes → state is four), so allow more than Django's 5.
    max_post_process_passes = 10
