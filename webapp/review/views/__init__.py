"""Review pages, one module per feature as `webapp.review.services` is split:

- `collaboration` — a trajectory's discussion panel: comments, tags, flags;
- `activity` — the project's activity page and the signed-in user's notifications;
- `queues` — preference queues: list, create, the queue page, its annotators;
- `judges` — LLM judges annotating a queue (the queue page's judges panel);
- `annotation` — the pairwise annotation page: the next pair under a lock, revisiting, judging;
- `disagreements` — the pairs a queue's voters split on, and settling them (adjudication);
- `turns` — per-turn judgements on the trajectory page and the diff;
- `snapshots` — dataset snapshots, their downloads and the one-click DPO run;
- `explorer` — the trajectory explorer: its page, saved views and JSON API (any member may read).

Thin: each view resolves the project through webapp.projects.access (outsiders 404, too small a role 403),
then makes one service or selector call. Capabilities: read for comments/tags/flags and activity;
annotate to write them and to judge (a queue's assigned annotators only); launch to create queues,
snapshots and downloads; adjudicate to see a queue's disagreements and settle them.
"""
