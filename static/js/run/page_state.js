// Every part of the page a status change alters — the status badges (live bar and header), the
// cancel-requested badges, the action buttons, the error banner, Started / Finished / Last heartbeat, the
// worker, the peak memory, the stalled badge, the queue panel, the checkpoints — kept true from
// Run.page_state() (the snapshot and every status event carry it), and the reward-hacking alarm banner.
import { timeElement } from "../when.js";
import { setAlarmExamples } from "./alarm_examples.js";
import { setCheckpoints } from "./checkpoints.js";
import { showConnection } from "./live_bar.js";
import { showPhase } from "./phase.js";
import { setQueue } from "./queue.js";
import { isFinal, live, state } from "./state.js";

export function setStatus(status) {
  if (!status) return;
  state.status = status;
  // The live part's badge and the page header's (rendered before the run moved on).
  document.querySelectorAll("[data-live-status], [data-run-status]").forEach(function (badge) {
    badge.className = "badge status-" + status;
    badge.textContent = live.STATUS_NAMES[status] || status;
  });
  if (isFinal()) setActions({ cancel: false });
  if (status !== "QUEUED") setQueue(null);  // a worker took it: the queue panel has said its piece
  showCancelRequested();
  showPhase();
  showConnection();
}

export function setCancelRequested(requested) {
  state.cancelRequested = Boolean(requested);
  showCancelRequested();
}

function showCancelRequested() {
  document.querySelectorAll("[data-live-cancel], [data-run-cancel-requested]").forEach(function (badge) {
    badge.hidden = !(state.cancelRequested && !isFinal());
  });
}

// Which buttons apply is the model's answer (Run.actions); the page only has the buttons the viewer's
// role allows at all.
export function setActions(actions) {
  document.querySelectorAll("[data-run-action]").forEach(function (action) {
    const name = action.dataset.runAction;
    if (name in actions) action.hidden = !actions[name];
  });
}

// A failure (or a lost worker) while the page is open: show its message (as text — it may quote
// model output); the traceback is on the page after a reload.
function setError(message) {
  if (!message) return;
  document.querySelectorAll("[data-run-error]").forEach(function (node) { node.textContent = message; });
  document.querySelectorAll("[data-run-error-panel]").forEach(function (panel) { panel.hidden = false; });
}

export function setTimes(source) {
  ["started_at", "finished_at", "heartbeat_at"].forEach(function (name) {
    if (!source[name]) return;
    document.querySelectorAll("[data-run-" + name + "]").forEach(function (cell) {
      const when = timeElement(source[name], "seconds");  // as the template's {% when … "seconds" %}
      if (when !== null) cell.replaceChildren(when);
    });
  });
}

function setWorker(worker) {
  document.querySelectorAll("[data-run-worker]").forEach(function (cell) {
    cell.textContent = worker ? "on " + worker : "";
  });
}

// Run.peak_memory as templates/experiments/_peak_memory.html writes it.
function peakMemoryText(peak) {
  if (!peak) return "—";
  const parts = [];
  if (typeof peak.rss_mb === "number") parts.push(peak.rss_mb + " MB resident");
  if (typeof peak.gpu_mb === "number") parts.push(peak.gpu_mb + " MB GPU");
  return parts.join(" · ") || "—";
}

export function setPeakMemory(peak) {
  if (!peak) return;
  document.querySelectorAll("[data-run-peak-memory]").forEach(function (cell) {
    cell.textContent = peakMemoryText(peak);
  });
}

// The stalled badge (templates/experiments/_stalled_badge.html, in the header and the async-health
// panel): Run.stall() — {since, for} or null — from the snapshot, every status change and the server's
// heartbeat news, so it appears while the page is open and goes away when progress arrives.
export function setStall(stall) {
  document.querySelectorAll("[data-run-stalled]").forEach(function (badge) {
    badge.hidden = !stall;
    if (!stall) return;
    badge.textContent = "stalled: no progress for " + stall.for;
    const since = timeElement(stall.since, "seconds");
    if (since !== null) {
      badge.title = "The trainer still sends heartbeats but has reported no metrics, trajectories, "
        + "checkpoints or phase since " + since.textContent + ": it may be hung (generation, learner, a tool).";
    }
  });
}

// Everything Run.page_state() carries: sent with every status change and in the snapshot.
export function applyPageState(source) {
  if ("stall" in source) setStall(source.stall);
  if ("queue" in source) setQueue(source.queue);
  if ("peak_memory" in source) setPeakMemory(source.peak_memory);
  if ("cancel_requested" in source) state.cancelRequested = Boolean(source.cancel_requested);
  setStatus(source.status);
  setTimes(source);
  if ("worker" in source) setWorker(source.worker);
  if ("error_message" in source) setError(source.error_message);
  if (source.actions) setActions(source.actions);
  if (Array.isArray(source.checkpoints)) setCheckpoints(source.checkpoints);
}

// The run-level reward-hacking alarm (webapp.rollouts.selectors.run_hacking_alarm): the header banner,
// from the snapshot and the server's seq-less hacking_alarm messages — shown when the alarm starts while
// the page is open, hidden again if it clears (as a reload would render it). Its pause button is a cancel
// action (data-run-action), shown while the run can be cancelled.
// Someone deleted the run while the page was open: say so (who, and what becomes of its data) and take the
// actions away: none applies to a run that is gone.
export function setDeleted(event) {
  const banner = document.querySelector("[data-run-deleted]");
  if (!banner) return;
  banner.hidden = false;
  const message = banner.querySelector("[data-run-deleted-message]");
  if (message) message.textContent = event.message || "";
  document.querySelectorAll("[data-run-action]").forEach(function (action) { action.hidden = true; });
}

export function setHackingAlarm(alarm) {
  const banner = document.querySelector("[data-hacking-alarm]");
  if (!banner) return;
  banner.hidden = !alarm;
  const message = banner.querySelector("[data-hacking-alarm-message]");
  if (alarm && message) message.textContent = alarm.message;  // criterion names are user text
  setAlarmExamples(banner, alarm);
}
