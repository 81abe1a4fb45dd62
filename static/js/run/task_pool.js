// The curriculum from failures' task pool (templates/recipes/_task_pool_panel.html): one row per step (size,
// frontier, replay buffer and share, what the step drew), and for a chosen step the success-rate histogram
// and the entries, each generated one with a link to the failed task it was born from. Fed by the stored
// `task_pool` events, then live (TaskPoolStep.summary()). Task texts are model-made or user data (an LLM
// generator writes tasks): textContent only, never HTML.
import { getJson, text } from "./dom.js";
import { root } from "./state.js";

const STEPS = new Map();
let shown = null;
let panel = null;

function latest() { return Math.max.apply(null, Array.from(STEPS.keys())); }
function percent(x) { return typeof x === "number" ? Math.round(100 * x) + "%" : "—"; }

function drawSteps() {
  const body = panel.querySelector("[data-task-pool-steps] tbody");
  body.textContent = "";
  Array.from(STEPS.values()).sort(function (a, b) { return a.step - b.step; }).forEach(function (s) {
    const row = document.createElement("tr");
    row.dataset.taskPoolStepRow = String(s.step);
    [s.step, s.size, s.frontier, s.replay].forEach(function (v) { row.appendChild(text("td", String(v), "num")); });
    row.appendChild(text("td", percent(s.replay_share), "num"));
    const d = s.drawn || {};
    row.appendChild(text("td", (d.tasks || 0) + " · " + (d.frontier || 0) + " · " + (d.replay || 0)));
    row.appendChild(text("td", String(s.generated || 0), "num"));
    const refused = text("td", String(refusedTotal(s)), "num");
    refused.dataset.taskPoolRefusedCount = String(refusedTotal(s));
    row.appendChild(refused);
    row.appendChild(text("td", s.generator || ""));
    body.appendChild(row);
  });
}

function refusedTotal(pool) {
  const refused = pool.refused || {};
  return Object.keys(refused).reduce(function (sum, k) { return sum + (Number(refused[k]) || 0); }, 0);
}

// The LLM generator's refusals at the chosen step, by reason (trainers/learn/curriculum_llm.py's REFUSALS).
function drawRefused(pool) {
  const line = panel.querySelector("[data-task-pool-refused]");
  const refused = pool.refused || {};
  const reasons = Object.keys(refused).sort();
  line.hidden = !reasons.length;
  line.textContent = reasons.length ? "Variants refused after step " + pool.step + ": " + reasons.map(function (k) {
    return k.replace(/_/g, " ") + " " + refused[k];
  }).join(" · ") : "";
}

function drawHistogram(pool) {
  const box = panel.querySelector("[data-task-pool-histogram]");
  box.textContent = "";
  const most = Math.max.apply(null, pool.histogram.concat([1]));
  pool.histogram.forEach(function (count, i) {
    const bar = document.createElement("div");
    bar.className = "task-pool-bin";
    bar.dataset.bin = String(i);
    bar.title = (i * 10) + "–" + (i * 10 + 10) + "% success: " + count + " task" + (count === 1 ? "" : "s");
    const fill = document.createElement("span");
    fill.style.height = Math.round(60 * count / most) + "px";
    bar.appendChild(fill);
    bar.appendChild(text("small", String(count)));
    box.appendChild(bar);
  });
}

function drawEntries(pool) {
  const body = panel.querySelector("[data-task-pool-entries] tbody");
  body.textContent = "";
  const known = new Set(pool.entries.map(function (e) { return e.id; }));
  pool.entries.slice().reverse().forEach(function (e) {
    const row = document.createElement("tr");
    row.id = "task-pool-" + e.id;
    row.dataset.taskPoolEntry = e.id;
    row.appendChild(text("td", e.prompt || e.id));
    row.appendChild(text("td", e.state, "badge task-" + e.state));
    row.appendChild(text("td", percent(e.rate), "num"));
    row.appendChild(text("td", String(e.attempts), "num"));
    row.appendChild(text("td", e.difficulty || ""));
    const born = text("td", "");
    if (e.parent) {
      const link = text(known.has(e.parent) ? "a" : "code", e.parent);
      if (known.has(e.parent)) link.href = "#task-pool-" + e.parent;
      link.dataset.bornFrom = e.parent;
      born.appendChild(link);
      born.appendChild(text("span", " (" + e.generator + ", step " + e.born + ")", "muted"));
    }
    row.appendChild(born);
    body.appendChild(row);
  });
}

function draw() {
  if (!panel || !STEPS.size) return;
  panel.querySelector("[data-task-pool-empty]").hidden = true;
  const step = shown === null || !STEPS.has(shown) ? latest() : shown;
  const pool = STEPS.get(step);
  const select = panel.querySelector("[data-task-pool-step]");
  select.textContent = "";
  Array.from(STEPS.keys()).sort(function (a, b) { return b - a; }).forEach(function (s) {
    const option = text("option", String(s));
    option.value = String(s);
    option.selected = s === step;
    select.appendChild(option);
  });
  panel.querySelector("[data-task-pool-states]").textContent = Object.keys(pool.states).sort().map(function (k) {
    return pool.states[k] + " " + k;
  }).join(" · ");
  drawSteps();
  drawHistogram(pool);
  drawRefused(pool);
  drawEntries(pool);
}

export function taskPoolEvent(event) {
  if (typeof event.step !== "number" || !Array.isArray(event.entries)) return;
  STEPS.set(event.step, event);
  draw();
}

export function startTaskPool() {
  panel = document.querySelector("[data-task-pool]");
  if (!panel || !root) return;
  panel.querySelector("[data-task-pool-step]").addEventListener("change", function (e) {
    const step = Number(e.target.value);
    shown = step === latest() ? null : step;
    draw();
  });
  getJson(root.dataset.eventsUrl + "?type=task_pool&limit=500")
    .then(function (response) { return response.ok ? response.json() : { events: [] }; })
    .then(function (body) { body.events.forEach(taskPoolEvent); })
    .catch(function () { return null; });
}
