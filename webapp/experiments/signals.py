"""What experiments' services announce to the sub-apps above them.

The project's activity log belongs to review: its rows point at trajectories and preference queues, so
it sits above experiments, which never imports it. A service sends one of these inside its transaction;
review's receivers (`webapp/review/services/activity.py`, connected in `ReviewConfig.ready`) write the
log line in that same transaction, so a write that rolls back leaves no line either.
"""

from __future__ import annotations

from django.dispatch import Signal

# Keyword arguments: run, user.
run_launched = Signal()
run_cancelled = Signal()
run_deleted = Signal()
# A run's status changed (it left its queue, started or ended). Keyword arguments: run_id, queue. Fleet,
# which knows the workers, tells the runs still waiting on that queue where they stand now.
run_moved = Signal()
# Keyword arguments: definition (an Environment or a Rubric), version (its new version), user.
definition_versioned = Signal()
