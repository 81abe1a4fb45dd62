// What each socket frame does to the page (docs/live.md lists the frames), the snapshot the page starts
// from, and the socket itself (static/js/live.js: resume, backoff, gaps).
import { addCheckpoint } from "./checkpoints.js";
import { experienceEvent } from "./experience.js";
import { taskPoolEvent } from "./task_pool.js";
import { applyMetrics, loadCurves } from "./curves.js";
import { feedEvent } from "./feed.js";
import { scheduleHistogram } from "./histogram.js";
import { noteEvaluation, setBest, setConnection, setProgress } from "./live_bar.js";
import { logEvent } from "./log.js";
import {
  applyPageState, setActions, setCancelRequested, setDeleted, setHackingAlarm, setPeakMemory, setStall,
  setTimes,
} from "./page_state.js";
import { setPhase } from "./phase.js";
import { setQueue } from "./queue.js";
import { getJson } from "./dom.js";
import { isFinal, live, root, state } from "./state.js";

function applyMetricsEvent(event) {
  applyMetrics(event);
  setProgress(event.step);
  if (event.values) noteEvaluation(event.step, event.values);
  if (event.values) setBest(event.values["reward/mean"], event.step);
}

const HANDLERS = {
  metrics: applyMetricsEvent,
  trajectories: function (event) { feedEvent(event); scheduleHistogram(); },
  phase: setPhase,
  status: function (event) {
    applyPageState(event);
    if (event.seq !== undefined) logEvent(event);
  },
  cancel_requested: function (event) {
    setCancelRequested(true);
    if (event.actions) setActions(event.actions);
  },
  hacking_alarm: function (event) { setHackingAlarm(event.alarm); },
  deleted: setDeleted,
  queue: function (event) { setQueue(event.queue); },
  peak_memory: function (event) { setPeakMemory(event.peak_memory); },
  heartbeat: function (event) {
    setTimes(event);  // the server's seq-less heartbeat_at; the trainer's own heartbeats carry none
    if ("stall" in event) setStall(event.stall);
  },
  checkpoint: function (event) { addCheckpoint(event); logEvent(event); },
  log: logEvent,
  experience: experienceEvent,
  task_pool: taskPoolEvent,
};

export function applyEvent(event) {
  if (typeof event.seq === "number" && event.seq > state.lastSeq) state.lastSeq = event.seq;
  const handler = HANDLERS[event.type];
  if (handler) handler(event);
}

export function applySnapshot(message) {
  const run = message.run;
  applyPageState(run);
  state.maxSteps = run.max_steps || state.maxSteps;
  setProgress(run.current_step);
  setBest(run.best_reward, run.best_reward_step);
  if (run.phase) setPhase(run.phase);
  if ("hacking_alarm" in run) setHackingAlarm(run.hacking_alarm);
  if (message.replay && message.replay.truncated) {
    // Too much was missed to replay over the socket: reload the curves over HTTP.
    loadCurves();
  }
}

export function connect() {
  state.following = true;
  live.followRun({
    path: root.dataset.wsPath,
    lastSeq: function () { return state.lastSeq; },
    onEvent: applyEvent,
    onSnapshot: applySnapshot,
    isFinal: isFinal,
    onState: setConnection,
  });
}

// The newest stored summaries of one type up to the seq the curves were read at (events.json).
export function loadRecent(type, limit) {
  const url = root.dataset.eventsUrl + "?type=" + type + "&limit=" + limit + "&until_seq=" + state.lastSeq;
  return getJson(url)
    .then(function (response) { return response.ok ? response.json() : { events: [] }; })
    .then(function (body) { return body.events; })
    .catch(function () { return []; });
}
