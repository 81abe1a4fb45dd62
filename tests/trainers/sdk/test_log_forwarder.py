"""What a library prints reaches a run's log as a researcher reads it: progress bars fold into the phase
line, Python warnings are one line, local paths are shortened, repeats are left out and counted."""

from __future__ import annotations

import logging

from trainers.sdk.events import LogForwarder, library_message, progress_bar, without_local_paths


def test_a_progress_bar_is_read_as_its_last_state():
    text = "\rLoading weights:  37%|███▋      | 100/272 [00:01<00:02, 90.1it/s]"
    assert progress_bar(text) == "Loading weights 100/272 (37%)"
    assert progress_bar("the tool answered slowly") is None


def test_local_paths_are_shortened():
    assert without_local_paths("in /root/.venv/lib/python3.11/site-packages/transformers/x.py") == (
        "in transformers/x.py"
    )
    assert without_local_paths("saved to /work/main/var/runs/7/step-3") == "saved to …/7/step-3"
    assert without_local_paths("3/4 done, ratio 0.5/1") == "3/4 done, ratio 0.5/1"


def test_a_python_warning_is_one_line_with_its_package():
    message = (
        "/usr/lib/python3/dist-packages/torch/utils/_pytree.py:185: FutureWarning: `foo` is deprecated.\n"
        "  warnings.warn("
    )
    assert (
        library_message("py.warnings", message)
        == "FutureWarning: `foo` is deprecated. (torch/utils/_pytree.py:185)"
    )
    assert library_message("ray", "worker died") == "ray: worker died"


def test_the_forwarder_folds_bars_leaves_out_repeats_and_counts_them():
    events, bars = [], []
    forwarder = LogForwarder(events.append, progress=bars.append)
    logger = logging.getLogger("tests.chatty")
    logger.addHandler(forwarder)
    logger.propagate = False
    try:
        for n in (1, 2, 3):
            logger.warning("retrying the tool (attempt %d)", n)
        logging.getLogger("tests.chatty").warning("Loading weights: 100%|██████████| 272/272 [00:00<00:00]")
        logger.error("the tool is down")
    finally:
        logger.removeHandler(forwarder)
        logger.propagate = True
    assert [(e["level"], e["message"]) for e in events] == [
        ("warning", "tests.chatty: retrying the tool (attempt 1)"),
        ("error", "tests.chatty: the tool is down"),
    ]
    assert bars == ["Loading weights 272/272 (100%)"]
    forwarder.close()
    assert events[-1]["message"] == "2 repeats of 1 library message were left out of this log"
