// The run page's shared state: the live section (#run-live), the elements its panels write to, and what
// the page knows about the run so far. Every module of static/js/run/ reads and writes this one object;
// the entry (static/js/run_live.js) finds the elements once, before any panel starts.
// The shared classic scripts the page loads first: static/js/live.js (the socket, status names,
// smoothing, plotText) and static/js/charts.js (every layout's colours, step axes).

export const root = document.getElementById("run-live");
export const live = window.RolloutLive;
export const chartTheme = window.RolloutCharts;
export const isDpo = Boolean(root) && root.dataset.kind === "dpo";  // DPO's own figures; no rollout reward

const data = root ? root.dataset : {};

export const state = {
  xAxis: "step",
  alpha: 0,
  logScale: false,
  series: {},       // key -> {x: [], y: []}, x in the chosen axis' units (time: ms since epoch)
  lastSeq: 0,       // highest event seq applied: what a reconnect asks the server to start after
  loading: true,    // while curves reload, live metric events wait in `held`
  held: [],
  pending: {},      // key -> [[x, y], ...] waiting for the next animation frame
  following: false, // the socket follower has started (a later curve reload must not move lastSeq)
  status: data.status,
  cancelRequested: false,
  currentStep: Number(data.currentStep) || 0,
  maxSteps: Number(data.maxSteps) || 0,
  best: null,
  phase: null,
  checkpoints: new Map(),  // step -> Checkpoint.summary()
  logLines: 0,
  paused: false,
  pausedGroups: [],
  feedTab: "train",
  binFilter: null,
  latestEval: null,  // {step, values: {key: value}}: the newest evaluation's figures
};

export function isFinal() { return live.FINAL.indexOf(state.status) !== -1; }

// The live section's elements, by the data-live-* marks of templates/live/run_live.html.
const MARKS = {
  status: "status", progress: "progress", step: "step", best: "best", bestStep: "best-step", connection: "connection",
  phase: "phase", phaseText: "phase-text", phaseProgress: "phase-progress", phaseElapsed: "phase-elapsed",
  x: "x", smoothing: "smoothing", smoothingValue: "smoothing-value", logScale: "log-scale", note: "note",
  charts: "charts", evalSection: "eval-section", evalCharts: "eval", metricSearch: "metric-search",
  metricList: "metric-list", metricCount: "metric-count", picked: "picked", histogram: "histogram",
  histogramField: "histogram-field", histogramSplit: "histogram-split", histogramNote: "histogram-note",
  feed: "feed", feedEmpty: "feed-empty", feedEval: "feed-eval", feedEvalEmpty: "feed-eval-empty",
  feedFiltered: "feed-filtered", feedFilter: "feed-filter", feedFilterText: "feed-filter-text",
  feedFilterExplorer: "feed-filter-explorer", feedFilterClear: "feed-filter-clear",
  evalLatest: "eval-latest", evalLatestStep: "eval-latest-step", evalLatestFigures: "eval-latest-figures",
  pause: "pause", pausedCount: "paused-count", log: "log",
};

export const ui = {};

export function findElements() {
  Object.keys(MARKS).forEach(function (name) {
    ui[name] = root.querySelector("[data-live-" + MARKS[name] + "]");
  });
}
