// Run page, live part: the entry that wires the panels of static/js/run/ (one ES module each; the page
// loads this file as type="module", no bundler). What the trainer is doing now (phase.js), curves from
// metrics.json that grow with websocket events (curves.js), per-step histograms (histogram.js), a rollout
// feed (feed.js), a log tail (log.js), the live bar (live_bar.js), the checkpoints (checkpoints.js), the
// queue panel (queue.js), every part a status change alters (page_state.js), the cancel dialog
// (cancel.js) and the async-health panel (async_health.js). events.js applies each socket frame.
// Protocol: docs/live.md. Model output and metric names are untrusted: text reaches the DOM through
// textContent and Plotly through live.plotText.
import { startAsyncHealth } from "./run/async_health.js";
import { bindCancelDialog } from "./run/cancel.js";
import { loadCurves, startCharts } from "./run/curves.js";
import { applySnapshot, connect, loadRecent } from "./run/events.js";
import { startExperience } from "./run/experience.js";
import { startTaskPool } from "./run/task_pool.js";
import { FEED_GROUPS, feedEvent, startFeed } from "./run/feed.js";
import { startHistogram } from "./run/histogram.js";
import { setProgress } from "./run/live_bar.js";
import { LOG_LINES, logEvent } from "./run/log.js";
import { startPhaseClock } from "./run/phase.js";
import { findElements, root, state } from "./run/state.js";

// Start: the state the page was rendered with (the same snapshot the socket sends), then curves (which
// also fix the seq we resume from), the recent log lines and rollout groups up to that seq, then the
// socket for everything after it.
function start() {
  window.websocketConnected = false;
  window.liveEventsReceived = 0;
  findElements();
  startPhaseClock();
  startCharts();
  bindCancelDialog();
  const rendered = document.getElementById("run-snapshot");
  if (rendered) applySnapshot({ run: JSON.parse(rendered.textContent) });
  setProgress(state.currentStep);
  startFeed();
  startHistogram();
  startExperience();  // Training-Free GRPO runs only (the panel is there)
  startTaskPool();  // runs with the curriculum from failures only
  loadCurves().then(function () {
    // A training step sends one trajectories event per group: FEED_GROUPS events fill the feed.
    return Promise.all([loadRecent("log", LOG_LINES), loadRecent("trajectories", FEED_GROUPS)]);
  }).then(function (recent) {
    recent[0].forEach(logEvent);
    recent[1].forEach(feedEvent);
    connect();
  });
}

if (root && window.Plotly) start();
startAsyncHealth();
