"""Experiments pages, one module per feature:

- `definitions` — environments and rubrics (both `VersionedDefinition`): list, page, create, edit, and
  their htmx partials;
- `runs` — runs: the list, launching, a run's page, cancel, notes, resume and fork.

Thin: every view resolves the project through webapp.projects.access (outsiders get 404, members whose
role lacks the capability get 403), looks objects up inside that project only, and makes one service or
selector call.
"""
