// The log tail: the last LOG_LINES lines — the trainer's log events, checkpoints saved and status
// changes — kept scrolled to the bottom unless the reader scrolled up.
import { clockTime, zoneName } from "../when.js";
import { text } from "./dom.js";
import { state, ui } from "./state.js";

export const LOG_LINES = 200;

// The log's lines carry times of day in the reader's zone: its heading names the zone once.
document.querySelectorAll("[data-live-log-zone]").forEach(function (node) {
  node.textContent = ", times in " + zoneName;
});

function clock(seconds) {
  if (typeof seconds !== "number") return "";
  return clockTime(new Date(seconds * 1000)) + " ";
}

function addLogLine(line, level) {
  const box = ui.log;
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 20;
  box.appendChild(text("div", line, "level-" + (level || "info")));
  state.logLines += 1;
  while (state.logLines > LOG_LINES) { box.removeChild(box.firstChild); state.logLines -= 1; }
  if (atBottom) box.scrollTop = box.scrollHeight;
}

export function logEvent(event) {
  if (event.type === "log") {
    addLogLine(clock(event.time) + "[" + (event.level || "info") + "] " + event.message, event.level);
  } else if (event.type === "checkpoint") {
    addLogLine(clock(event.time) + "[checkpoint] step " + event.step + " saved" + (event.metrics_text ? " (" + event.metrics_text + ")" : ""));
  } else if (event.type === "status") {
    addLogLine(clock(event.time) + "[status] " + event.status + (event.message ? ": " + event.message : ""),
      event.status === "FAILED" || event.status === "LOST" ? "error" : "info");
  }
}
