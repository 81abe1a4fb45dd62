// The checkpoints table and the "start a new run from step N" links under it
// (templates/experiments/run_detail.html renders the same rows), rebuilt from Checkpoint.summary() as
// the snapshot, status events and checkpoint events bring them.
import { timeElement } from "../when.js";
import { text } from "./dom.js";
import { state } from "./state.js";

function byStep(a, b) { return a.step - b.step; }

function emptyRow(columns) {
  const empty = document.createElement("tr");
  empty.dataset.runCheckpointsEmpty = "";
  const cell = text("td", "No checkpoints yet.", "muted");
  cell.colSpan = columns;
  empty.appendChild(cell);
  return empty;
}

function checkpointRow(c, downloadUrl) {
  const row = document.createElement("tr");
  row.dataset.checkpointStep = String(c.step);
  if (c.deleted) row.className = "muted";
  row.appendChild(text("td", String(c.step), "num"));
  const kind = text("td", c.kind || "full");
  if (c.deleted) { kind.appendChild(document.createTextNode(" ")); kind.appendChild(text("span", "pruned", "badge")); }
  row.appendChild(kind);
  // The key metrics as columns, already formatted by Checkpoint.summary() (4 significant digits).
  (c.key_metrics || []).forEach(function (value) { row.appendChild(text("td", value, "num metric")); });
  row.appendChild(text("td", c.metrics_text || "", "small"));
  const created = text("td", "", "small");
  const when = c.created_at ? timeElement(c.created_at, "exact") : null;  // as the template's {% when %}
  if (when !== null) created.appendChild(when);
  row.appendChild(created);
  const weights = text("td", "", "small");
  if (!c.deleted && c.id && downloadUrl) {
    const link = text("a", "safetensors");
    link.href = downloadUrl.replace(/\/0\/weights\/$/, "/" + c.id + "/weights/");
    link.setAttribute("download", "");
    link.dataset.checkpointDownload = "";
    weights.appendChild(link);
    // The whole model (weights, config, tokenizer) in one tar: unpacked, a model any run can start from.
    const model = text("a", "model.tar");
    model.href = link.href + "?file=model.tar";
    model.setAttribute("download", "");
    model.title = "weights, config and tokenizer: unpacked, a model any run can start from";
    model.dataset.checkpointModel = "";
    weights.appendChild(document.createTextNode(" · "));
    weights.appendChild(model);
  }
  row.appendChild(weights);
  return row;
}

function drawCheckpoints() {
  drawStartLinks();
  const table = document.querySelector("[data-run-checkpoints]");
  const body = table && table.querySelector("tbody");
  if (!body) return;
  body.textContent = "";
  const rows = Array.from(state.checkpoints.values()).sort(byStep);
  if (!rows.length) {
    body.appendChild(emptyRow(table.querySelectorAll("thead th").length));
    return;
  }
  rows.forEach(function (c) { body.appendChild(checkpointRow(c, table.dataset.downloadUrl)); });
}

// "Start a new GRPO-family run from a checkpoint's weights: step N" (researchers only), for the kept ones.
function drawStartLinks() {
  const start = document.querySelector("[data-start-from-checkpoint]");
  const links = start && start.querySelector("[data-start-from-checkpoint-links]");
  if (!links) return;
  const kept = Array.from(state.checkpoints.values())
    .filter(function (c) { return !c.deleted && typeof c.id === "number"; })
    .sort(byStep);
  links.textContent = "";
  kept.forEach(function (c, index) {
    if (index) links.appendChild(document.createTextNode(" · "));
    const link = text("a", "step " + c.step);
    link.href = start.dataset.runCreateUrl + "?from_checkpoint=" + encodeURIComponent(String(c.id));
    links.appendChild(link);
  });
  start.hidden = !kept.length;
}

export function setCheckpoints(list) {
  state.checkpoints = new Map();
  list.forEach(function (c) { state.checkpoints.set(c.step, c); });
  drawCheckpoints();
}

export function addCheckpoint(event) {
  if (typeof event.step !== "number") return;
  state.checkpoints.set(event.step, event);
  drawCheckpoints();
}
