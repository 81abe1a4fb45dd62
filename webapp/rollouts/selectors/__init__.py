"""Every read of rollouts — trajectories, turns, groups, metric curves, checkpoints, a run's events — is
here, in the module of what it reads (docs/architecture.md, "Where a read goes"):

- `trajectories` — a trajectory or a group as a page shows it: the group view, the trajectory view and
  its turns, the diff and what picks a pair to diff, tasks across steps and runs, exports (JSON, ATIF);
- `metrics` — a run's metric curves, through the one downsampling every page, feed and API uses;
- `runs` — anything else about a run's rollouts as a whole: its trajectory list, checkpoints, event
  log, lineage, hacking alarm, judges, async health, and the stored trajectory a rubric scores.

Each function takes the project or a run already looked up inside it (`webapp.projects.access`), so no
read crosses a project. Not here: the explorer's full-text index (`webapp.rollouts.search`: what
ingestion writes and the queries that read it, for `webapp.review.explorer`) and the diff's alignment
(`webapp.rollouts.diff`: a computation over turns already read).
"""
