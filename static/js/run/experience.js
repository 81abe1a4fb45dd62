// Training-Free GRPO's experience library (templates/recipes/_experience_panel.html): the library as a
// document after a chosen step, each insight marked with what that step did to it (added, modified,
// deleted), the step's edits as the experience model asked for them (refused ones with the reason), and
// what the experience model cost. Fed by the stored `experience` events, then live by the socket's
// (ExperienceLibraryStep.summary()). Model output reaches the DOM only as textContent.
import { getJson, text } from "./dom.js";
import { root } from "./state.js";

const STEPS = new Map();  // step → summary
let shown = null;  // the step the select shows; null follows the newest
let panel = null;

function latest() { return Math.max.apply(null, Array.from(STEPS.keys())); }

function badge(words, kind) { return text("span", words, "badge experience-" + kind); }

function itemRow(item, edit) {
  const row = document.createElement("li");
  row.dataset.experienceId = item.id;
  row.appendChild(text("code", item.id));
  row.appendChild(document.createTextNode(" "));
  row.appendChild(text("span", item.text, "experience-text"));
  if (edit && edit.op === "add") { row.dataset.experienceChange = "added"; row.appendChild(badge("added", "added")); }
  if (edit && edit.op === "modify") {
    row.dataset.experienceChange = "modified";
    row.appendChild(badge("modified", "modified"));
    row.appendChild(text("del", edit.before, "muted small experience-before"));
  }
  return row;
}

function deletedRow(edit) {
  const row = document.createElement("li");
  row.dataset.experienceId = edit.id;
  row.dataset.experienceChange = "deleted";
  row.className = "muted";
  row.appendChild(text("code", edit.id));
  row.appendChild(document.createTextNode(" "));
  row.appendChild(text("del", edit.before));
  row.appendChild(badge("deleted", "deleted"));
  return row;
}

function editRow(edit) {
  const row = document.createElement("li");
  row.dataset.experienceEdit = edit.op;
  row.appendChild(text("strong", edit.op.toUpperCase() + (edit.id ? " " + edit.id : "")));
  if (edit.text) row.appendChild(text("span", ": " + edit.text));
  row.appendChild(text("span", " (group " + edit.group + ")", "muted"));
  if (!edit.applied) {
    row.className = "muted";
    row.dataset.experienceRefused = "";
    row.appendChild(text("span", " — refused: " + edit.reason));
  }
  return row;
}

function drawSelect(step) {
  const select = panel.querySelector("[data-experience-step]");
  select.textContent = "";
  Array.from(STEPS.keys()).sort(function (a, b) { return b - a; }).forEach(function (s) {
    const option = text("option", String(s) + (s === 0 ? " (start)" : ""));
    option.value = String(s);
    option.selected = s === step;
    select.appendChild(option);
  });
}

function draw() {
  if (!panel || !STEPS.size) return;
  const step = shown === null || !STEPS.has(shown) ? latest() : shown;
  const library = STEPS.get(step);
  drawSelect(step);
  const applied = library.edits.filter(function (e) { return e.applied; });
  const lastEdit = new Map();
  applied.forEach(function (e) { lastEdit.set(e.id, e); });
  const items = panel.querySelector("[data-experience-items]");
  items.textContent = "";
  library.items.forEach(function (item) { items.appendChild(itemRow(item, lastEdit.get(item.id))); });
  applied.filter(function (e) { return e.op === "delete"; }).forEach(function (e) { items.appendChild(deletedRow(e)); });
  panel.querySelector("[data-experience-empty]").hidden = items.children.length > 0;
  const counts = library.counts;
  panel.querySelector("[data-experience-counts]").textContent =
    counts.added + " added · " + counts.modified + " modified · " + counts.deleted + " deleted" +
    (counts.refused ? " · " + counts.refused + " refused" : "") + " · " + library.items.length + " in the library";
  let spent = 0;
  STEPS.forEach(function (s, at) { if (at <= step) spent += s.prompt_tokens + s.completion_tokens; });
  panel.querySelector("[data-experience-cost]").textContent = "experience model: " + library.groups_asked +
    " group" + (library.groups_asked === 1 ? "" : "s") + " asked, " + (library.prompt_tokens + library.completion_tokens) +
    " tokens at this step, " + spent + " so far";
  const edits = panel.querySelector("[data-experience-edits]");
  edits.textContent = "";
  library.edits.forEach(function (e) { edits.appendChild(editRow(e)); });
  if (!library.edits.length) edits.appendChild(text("li", step === 0 ? "The library the run starts with." : "No edits: no group had a contrast, or its answer had none.", "muted"));
}

export function experienceEvent(event) {
  if (typeof event.step !== "number" || !Array.isArray(event.items)) return;
  STEPS.set(event.step, event);
  draw();
}

export function startExperience() {
  panel = document.querySelector("[data-experience-library]");
  if (!panel || !root) return;
  panel.querySelector("[data-experience-step]").addEventListener("change", function (e) {
    const step = Number(e.target.value);
    shown = step === latest() ? null : step;
    draw();
  });
  getJson(root.dataset.eventsUrl + "?type=experience&limit=500")
    .then(function (response) { return response.ok ? response.json() : { events: [] }; })
    .then(function (body) { body.events.forEach(experienceEvent); })
    .catch(function () { return null; });
}
