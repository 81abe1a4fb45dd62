// The live bar above the charts: the progress bar and "step N of M", the best training reward, the
// socket's state ("live", "reconnecting…"), and the newest evaluation's figures as numbers.
import { fixed, text } from "./dom.js";
import { EVAL_FIRST, EVAL_PREFIX } from "./chart_specs.js";
import { isFinal, live, state, ui } from "./state.js";

export function setProgress(step) {
  if (typeof step === "number" && step > state.currentStep) state.currentStep = step;
  const max = state.maxSteps;
  const ratio = max ? Math.min(1, state.currentStep / max) : 0;
  ui.progress.firstElementChild.style.width = (100 * ratio).toFixed(1) + "%";
  ui.progress.setAttribute("aria-valuenow", String(state.currentStep));
  ui.step.textContent = "step " + state.currentStep + " of " + max;
}

// The best mean training reward and the step that reached it first (Run.progress_after's rule).
export function setBest(value, step) {
  if (typeof value !== "number") return;
  if (state.best === null || value > state.best) {
    state.best = value;
    ui.best.textContent = fixed(value, 4);
    if (ui.bestStep) ui.bestStep.textContent = typeof step === "number" ? " at step " + step : "";
  }
}

let connection = { label: "connecting…", kind: "muted" };

// The socket's state as live.followRun reports it: kind ok | down | refused | muted.
export function setConnection(label, kind) {
  connection = { label: label, kind: kind };
  showConnection();
}

// A run that has ended is not live, even while its socket stays open: the label says how it ended, in
// grey, from the moment the status arrives (page_state.js calls this on every status).
export function showConnection() {
  if (!ui.connection) return;
  const ended = isFinal() && connection.kind !== "refused";
  ui.connection.textContent = ended ? "run " + (live.STATUS_NAMES[state.status] || state.status).toLowerCase() : connection.label;
  ui.connection.className = "connection small " + (ended ? "muted" : connection.kind);
  ui.connection.dataset.connection = ended ? "ended" : connection.kind;
}

export function noteEvaluation(step, values) {
  if (typeof step !== "number") return;
  const latest = state.latestEval;
  if (latest && step < latest.step) return;
  const merged = latest && latest.step === step ? latest.values : {};
  Object.keys(values).forEach(function (key) {
    if (key.indexOf(EVAL_PREFIX) === 0 && typeof values[key] === "number") merged[key] = values[key];
  });
  if (!Object.keys(merged).length) return;
  state.latestEval = { step: step, values: merged };
  showEvaluation();
}

// The newest evaluation among the loaded curves (their last points at the latest evaluated step).
export function noteEvaluationFromCurves(series) {
  let lastStep = null;
  EVAL_FIRST.forEach(function (key) {
    const c = series[key];
    if (c && c.x.length && (lastStep === null || c.x[c.x.length - 1] > lastStep)) lastStep = c.x[c.x.length - 1];
  });
  const values = {};
  EVAL_FIRST.forEach(function (key) {
    const c = series[key];
    if (c && c.x.length && c.x[c.x.length - 1] === lastStep) values[key] = c.y[c.y.length - 1];
  });
  if (lastStep !== null) noteEvaluation(lastStep, values);
}

// "accuracy 0.250 · reward/mean 0.300": accuracy first, then the mean reward (what EVAL_FIRST names).
function showEvaluation() {
  const latest = state.latestEval;
  if (!latest || !ui.evalLatest) return;
  ui.evalLatest.hidden = false;
  ui.evalLatestStep.textContent = String(latest.step);
  ui.evalLatestFigures.textContent = "";
  EVAL_FIRST.filter(function (key) { return key in latest.values; }).forEach(function (key, index) {
    if (index) ui.evalLatestFigures.appendChild(document.createTextNode(" · "));
    const figure = text("span", key.slice(EVAL_PREFIX.length) + " ");
    figure.dataset.evalFigure = key;
    figure.appendChild(text("strong", fixed(latest.values[key], 3)));
    ui.evalLatestFigures.appendChild(figure);
  });
}
