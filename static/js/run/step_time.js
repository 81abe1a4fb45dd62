// The step-time chart's stack: the time/* metrics grouped into phases (trainers.sdk.wire.STEP_TIME_PARTS,
// rendered into the page as JSON) and stacked per step; "other" is the rest of step_time.

function readParts() {
  const node = document.getElementById("step-time-parts");
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

// x -> value of one series ({x: [], y: []}, or nothing).
function byX(series) {
  const values = new Map();
  if (series) series.x.forEach(function (x, i) { values.set(x, series.y[i]); });
  return values;
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
    traces.push({ type: "bar", name: part.name, x: ordered, y: ys });
  });
  if (total.size) {
    const other = ordered.map(function (x, i) {
      const all = total.get(x);
      return typeof all === "number" ? Math.max(0, all - sums[i]) : 0;
    });
    if (other.some(function (v) { return v > 1e-3; })) traces.push({ type: "bar", name: "other", x: ordered, y: other });
  }
  return traces;
}
