// The phase line: what the trainer is doing now (its newest `phase` event: loading, evaluating,
// generating, scoring, updating, syncing, checkpointing), with a progress bar when it counts and the time
// spent so far, ticking every second. Shown while the run is active.
import { isFinal, state, ui } from "./state.js";

// Written as the template writes it (templates/live/run_live.html).
export function phaseText(phase) {
  let words = phase.phase.charAt(0).toUpperCase() + phase.phase.slice(1);
  if (typeof phase.step === "number") words += " · step " + phase.step;
  if (phase.message) words += " · " + phase.message;
  return words;
}

export function setPhase(phase) {
  if (!phase || !phase.phase) return;
  // Replay and live overlap: never go back to an older phase.
  if (state.phase && typeof phase.seq === "number" && typeof state.phase.seq === "number" &&
      phase.seq < state.phase.seq) return;
  state.phase = phase;
  showPhase();
}

export function showPhase() {
  const phase = state.phase;
  ui.phase.hidden = !phase || isFinal();
  if (ui.phase.hidden) return;
  ui.phaseText.textContent = phaseText(phase);
  const total = typeof phase.total === "number" ? phase.total : 0;
  const done = typeof phase.done === "number" ? phase.done : 0;
  ui.phaseProgress.hidden = !total;
  ui.phaseProgress.setAttribute("aria-valuemax", String(total));
  ui.phaseProgress.setAttribute("aria-valuenow", String(done));
  ui.phaseProgress.firstElementChild.style.width = (total ? (100 * Math.min(1, done / total)) : 0).toFixed(1) + "%";
  tickPhase();
}

export function duration(seconds) {
  seconds = Math.max(0, Math.round(seconds));
  if (seconds < 60) return seconds + " s";
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return minutes + " min " + (seconds % 60) + " s";
  return Math.floor(minutes / 60) + " h " + (minutes % 60) + " min";
}

// The phase's clock: its start is the event's time minus the time already spent in it (the trainer's
// clock; a browser whose clock is far off shows the time spent as reported).
function tickPhase() {
  const phase = state.phase;
  if (!phase || ui.phase.hidden) return;
  const spent = typeof phase.elapsed_s === "number" ? phase.elapsed_s : 0;
  let elapsed = spent;
  if (typeof phase.time === "number") elapsed = Math.max(spent, Date.now() / 1000 - (phase.time - spent));
  ui.phaseElapsed.textContent = duration(elapsed);
}

export function startPhaseClock() {
  window.setInterval(tickPhase, 1000);
}
