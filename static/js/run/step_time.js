// "Step time by phase": the one stacking rule of both charts that show it (the run page's curves and the
// async-health panel). The time/* metrics are grouped into phases (trainers.sdk.wire.STEP_TIME_PARTS,
// rendered into the page as JSON), stacked per step, and the rest of step_time — the time no phase
// accounts for: the learner idle for samples, a queue, a lock, overhead — is "other". Each phase has
// one colour wherever it is drawn.

export const OTHER = "other";
export const PHASE_COLOURS = { generate: "#4c6ef5", score: "#f59f00", learn: "#2f9e44", sync: "#ae3ec9", [OTHER]: "#adb5bd" };

function readParts() {
  const node = document.getElementById("step-time-parts") || document.getElementById("async-health-parts");
  const parts = node ? JSON.parse(node.textContent) : {};
  return Object.keys(parts).map(function (name) {
    return { name: name, keys: parts[name].map(function (part) { return "time/" + part; }) };
  });
}

let stack = null;
function phases() {
  if (stack === null) stack = readParts();
  return stack;
}

// The metric keys the stack is made of: step_time and every phase's time/* parts.
export function stepTimeKeys() {
  return ["step_time"].concat(phases().reduce(function (all, part) { return all.concat(part.keys); }, []));
}

// x -> value of one series ({x: [], y: []}, or nothing).
function byX(series) {
  const values = new Map();
  if (series) series.x.forEach(function (x, i) { values.set(x, series.y[i]); });
  return values;
}

function bar(name, xs, ys) {
  return { type: "bar", name: name, x: xs, y: ys, marker: { color: PHASE_COLOURS[name] },
    hovertemplate: "step %{x}: " + name + " %{y:.2f} s<extra></extra>" };
}

// Plotly bar traces, one per phase that reported anything, and the rest of step_time; `series` maps
// metric keys to {x, y}.
export function stackTraces(series) {
  const xs = new Set();
  const parts = phases().map(function (part) {
    const columns = part.keys.map(function (key) { return byX(series[key]); });
    columns.forEach(function (column) { column.forEach(function (_, x) { xs.add(x); }); });
    return { name: part.name, columns: columns };
  });
  const total = byX(series.step_time);
  total.forEach(function (_, x) { xs.add(x); });
  const ordered = Array.from(xs).sort(function (a, b) { return a - b; });
  const traces = [];
  const sums = ordered.map(function () { return 0; });
  parts.forEach(function (part) {
    if (!part.columns.some(function (column) { return column.size; })) return;
    const ys = ordered.map(function (x, i) {
      const value = part.columns.reduce(function (sum, column) { return sum + (column.get(x) || 0); }, 0);
      sums[i] += value;
      return value;
    });
    traces.push(bar(part.name, ordered, ys));
  });
  if (total.size) {
    const other = ordered.map(function (x, i) {
      const all = total.get(x);
      return typeof all === "number" ? Math.max(0, all - sums[i]) : 0;
    });
    if (other.some(function (v) { return v > 1e-3; })) traces.push(bar(OTHER, ordered, other));
  }
  return traces;
}
