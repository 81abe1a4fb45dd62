// The run page's curves: the fixed charts (chart_specs.js), evaluation small multiples, charts picked
// from the metric picker; loaded from metrics.json and grown by the socket's metrics events
// (Plotly.extendTraces, batched per animation frame; a new key redraws its chart with Plotly.react).
// Metric keys are untrusted: they reach Plotly through live.plotText.
import { bandPoints, interpolate, legendRows, xAxisLayout } from "./chart_axes.js";
import { CHARTS, EVAL_FIRST, EVAL_PREFIX, PLOT_CONFIG } from "./chart_specs.js";
import { getJson, text } from "./dom.js";
import { noteEvaluationFromCurves } from "./live_bar.js";
import { chartTheme, live, root, state, ui } from "./state.js";
import { stackTraces } from "./step_time.js";

const charts = [];
const evalCharts = new Map();    // key -> chart
const pickedCharts = new Map();  // key -> chart
let chartCount = 0;
let flushScheduled = false;

function makeChart(spec, container) {
  const div = document.createElement("div");
  div.className = "live-chart";
  div.id = "chart-" + spec.id;
  if (spec.keys && spec.keys.length === 1 && !spec.fixed) div.dataset.key = spec.keys[0];
  div.hidden = !spec.always;
  container.appendChild(div);
  return { spec: spec, div: div, traces: [], drawn: false, emaLast: {} };
}

function matches(spec, key) {
  return (spec.keys && spec.keys.indexOf(key) !== -1) || (spec.prefix && key.indexOf(spec.prefix) === 0) ||
    spec.band === key;
}

function fixedChartFor(key) {
  for (const chart of charts) {
    if (chart.spec.fixed && matches(chart.spec, key)) return chart;
  }
  return null;
}

// The chart showing `key`, made on demand for evaluation metrics; null for a key only the picker offers.
function chartFor(key) {
  const fixed = fixedChartFor(key);
  if (fixed) return fixed;
  if (key.indexOf(EVAL_PREFIX) === 0) return evalChart(key);
  return pickedCharts.get(key) || null;
}

function evalRank(key) {
  const first = EVAL_FIRST.indexOf(key);
  return first === -1 ? EVAL_FIRST.length : first;
}

// Evaluation as small multiples: one small chart per eval/ metric, accuracy first.
function evalChart(key) {
  if (evalCharts.has(key)) return evalCharts.get(key);
  chartCount += 1;
  const chart = makeChart({ id: "eval-" + chartCount, title: key.slice(EVAL_PREFIX.length), keys: [key], small: true },
    ui.evalCharts);
  evalCharts.set(key, chart);
  charts.push(chart);
  Array.from(evalCharts.keys()).sort(function (a, b) {
    return evalRank(a) - evalRank(b) || (a < b ? -1 : a > b ? 1 : 0);
  }).forEach(function (k) { ui.evalCharts.appendChild(evalCharts.get(k).div); });
  ui.evalSection.hidden = false;
  return chart;
}

function pick(key) {
  if (chartFor(key)) return;
  chartCount += 1;
  const chart = makeChart({ id: "picked-" + chartCount, title: key, keys: [key], always: true }, ui.picked);
  const remove = text("button", "×", "secondary remove");
  remove.type = "button";
  remove.title = "Remove this chart";
  remove.setAttribute("aria-label", "Remove the chart of " + key);
  remove.addEventListener("click", function () {
    Plotly.purge(chart.div);
    chart.div.remove();
    pickedCharts.delete(key);
    charts.splice(charts.indexOf(chart), 1);
    renderPicker();
  });
  pickedCharts.set(key, chart);
  charts.push(chart);
  drawChart(chart);
  chart.div.appendChild(remove);
  renderPicker();
}

// The metric picker: every key no chart shows, filtered by the search box.
function renderPicker() {
  const query = ui.metricSearch.value.trim().toLowerCase();
  const rest = Object.keys(state.series).filter(function (key) { return !chartFor(key); }).sort();
  const shown = rest.filter(function (key) { return !query || key.toLowerCase().indexOf(query) !== -1; });
  ui.metricList.textContent = "";
  shown.forEach(function (key) {
    const item = document.createElement("li");
    const button = text("button", key, "secondary");
    button.type = "button";
    button.dataset.metric = key;
    button.title = "Chart " + key;
    button.addEventListener("click", function () { pick(key); });
    item.appendChild(button);
    ui.metricList.appendChild(item);
  });
  ui.metricCount.textContent = rest.length === shown.length ? rest.length + " more" : shown.length + " of " + rest.length;
}

function chartKeys(chart) {
  const spec = chart.spec;
  if (spec.prefix) {
    const keys = Object.keys(state.series).filter(function (key) {
      return fixedChartFor(key) === chart && key !== spec.band && (!spec.keys || spec.keys.indexOf(key) === -1);
    }).sort();
    return (spec.keys || []).concat(keys);
  }
  return spec.keys;
}

// Whether the chart needs another axis (or markers) for its points now.
function axisStale(chart) {
  if (state.xAxis !== "step") return false;
  const keys = chartKeys(chart).concat(chart.spec.stack ? ["step_time"] : []);
  const axis = xAxisLayout(keys);
  if (axis.dtick !== chart.dtick || String(axis.range) !== String(chart.range)) return true;
  return keys.some(function (key) {
    const s = state.series[key];
    return s && chartTheme.lineMode(s.x.length) !== chartTheme.lineMode(s.x.length - 1) && chart.marked;
  });
}

// The Plotly traces of a line chart (raw traces under the smoothed ones while smoothing, the ± std band)
// and, in chart.traces, which key and kind each one is.
function lineData(chart, keys) {
  const spec = chart.spec;
  const traces = [], data = [];
  const smoothing = state.alpha > 0;
  const labelOf = function (key) { return spec.prefix && key.indexOf(spec.prefix) === 0 ? key.slice(spec.prefix.length) : key; };
  // Series lying on each other stay visible: each its own dash and marker, the legend names the twin.
  chart.sameAs = chartTheme.sameAs(state.series, keys);
  keys.forEach(function (key, index) {
    const s = state.series[key] || { x: [], y: [] };
    const twin = chart.sameAs[key];
    const label = live.plotText(labelOf(key) + (twin ? " (same as " + labelOf(twin) + ")" : ""));
    const style = keys.length > 1 ? chartTheme.seriesStyle(index) : { dash: "solid", symbol: "circle" };
    if (smoothing) {
      traces.push({ key: key, kind: "raw" });
      data.push({ x: s.x.slice(), y: s.y.slice(), name: label + " (raw)", mode: "lines", showlegend: false,
        hoverinfo: "skip", line: { width: 1 }, opacity: 0.25, legendgroup: key });
    }
    traces.push({ key: key, kind: "line" });
    data.push({ x: s.x.slice(), y: live.ema(s.y, state.alpha), name: label, mode: chartTheme.lineMode(s.x.length),
      legendgroup: key, line: { width: 2, dash: style.dash }, marker: { size: 6, symbol: style.symbol } });
  });
  if (spec.band && state.series[spec.band] && state.series[keys[0]]) {
    const band = bandPoints(state.series[keys[0]], state.series[spec.band]);
    traces.push({ key: spec.band, kind: "upper" }, { key: spec.band, kind: "lower" });
    data.push({ x: band.x, y: band.upper, mode: "lines", line: { width: 0 }, showlegend: false, hoverinfo: "skip" });
    data.push({ x: band.x, y: band.lower, mode: "lines", line: { width: 0 }, fill: "tonexty",
      fillcolor: "rgba(59, 91, 219, 0.15)", name: "± std", hoverinfo: "skip" });
  }
  chart.traces = traces;
  return data;
}

function chartLayout(chart, keys, data) {
  const spec = chart.spec;
  const showlegend = spec.stack || keys.length > 1 || Boolean(spec.band);
  const names = data.filter(function (t) { return t.showlegend !== false; }).map(function (t) { return t.name; });
  const rows = showlegend ? legendRows(names, (chart.div.clientWidth || 560) - 64) : 0;
  const xaxis = xAxisLayout(keys.concat(spec.stack ? ["step_time"] : []));
  chart.dtick = xaxis.dtick;
  chart.range = xaxis.range;
  chart.marked = data.some(function (t) { return t.mode === "lines+markers"; });
  const yaxis = { type: state.logScale && !spec.stack ? "log" : "linear" };
  // Fractions (accuracy) on a fixed 0–1 scale, unless the scale is logarithmic.
  if (!state.logScale && keys.length && keys.every(chartTheme.isFraction)) yaxis.range = chartTheme.fractionRange();
  const layout = {
    // The title keeps to the top of the figure and the legend sits between it and the plot, with
    // room made for as many legend rows as the names need (below the plot it hit the x-axis title).
    title: { text: live.plotText(spec.title), font: { size: 13 }, yref: "container", y: 1, yanchor: "top", pad: { t: 8 } },
    margin: { l: 50, r: 14, t: 34 + 20 * rows, b: spec.small ? 34 : 40 },
    xaxis: xaxis, hovermode: "x unified", showlegend: showlegend,
    yaxis: yaxis,
    legend: { orientation: "h", x: 0, y: 1, xanchor: "left", yanchor: "bottom", font: { size: 11 } },
    uirevision: state.xAxis + state.logScale,
  };
  if (spec.stack) { layout.barmode = "stack"; layout.bargap = 0.15; }
  return layout;
}

function rememberSmoothedEnds(chart, keys) {
  chart.emaLast = {};
  keys.forEach(function (key) {
    const smoothed = live.ema((state.series[key] || { y: [] }).y, state.alpha);
    chart.emaLast[key] = smoothed.length ? smoothed[smoothed.length - 1] : null;
  });
}

// Full redraw of one chart (first data, a new key, another axis, smoothing or scale): Plotly.react.
function drawChart(chart) {
  const spec = chart.spec;
  const keys = chartKeys(chart);
  let data;
  if (spec.stack) {
    chart.traces = [];
    data = stackTraces(state.series);
  } else {
    data = lineData(chart, keys);
  }
  rememberSmoothedEnds(chart, keys);
  const hasData = spec.stack ? data.length > 0 :
    keys.some(function (k) { return state.series[k] && state.series[k].x.length; });
  chart.div.hidden = !(hasData || spec.always);
  if (chart.div.hidden) return;
  const layout = chartLayout(chart, keys, data);
  chart.empty = !hasData;  // an always-shown chart before its first point (a queued run): it says so
  Plotly.react(chart.div, hasData ? data : [], chartTheme.themed(hasData ? layout : chartTheme.noPoints(layout)), PLOT_CONFIG);
  chart.div.dataset.points = hasData ? "yes" : "none";
  chart.drawn = true;
  // From curve to cause: a point of any step curve opens that step's groups (static/js/curve_click.js).
  if (window.RolloutStepClick && root.dataset.groupsUrl) {
    window.RolloutStepClick.bind(chart.div, {
      url: root.dataset.groupsUrl,
      split: ui.evalCharts.contains(chart.div) ? "eval" : "",
      enabled: function () { return state.xAxis === "step"; },
    });
  }
}

function drawAll() {
  charts.forEach(drawChart);
  renderPicker();
}

// Whether two of the chart's series started or stopped coinciding since it was drawn (their legend says so).
function sameAsChanged(chart) {
  const keys = chartKeys(chart);
  if (keys.length < 2) return false;
  return JSON.stringify(chartTheme.sameAs(state.series, keys)) !== JSON.stringify(chart.sameAs || {});
}

function structureChanged(chart, points) {
  const spec = chart.spec;
  return spec.stack || !chart.drawn || chart.div.hidden || chart.empty || sameAsChanged(chart) ||
    chartKeys(chart).some(function (k) { return !chart.traces.some(function (t) { return t.key === k; }); }) ||
    (spec.band && points[spec.band] && !chart.traces.some(function (t) { return t.kind === "upper"; })) ||
    axisStale(chart);
}

// The y values a trace gets for the points added to its key.
function addedYs(chart, trace, added) {
  if (trace.kind === "raw") return added.map(function (p) { return p[1]; });
  if (trace.kind === "line") {
    let last = chart.emaLast[trace.key];
    const ys = added.map(function (p) { last = live.emaStep(last, p[1], state.alpha); return last; });
    chart.emaLast[trace.key] = last;
    return ys;
  }
  const mean = state.series[chart.spec.keys[0]];
  const sign = trace.kind === "upper" ? 1 : -1;
  return added.map(function (p) { const m = interpolate(mean, p[0]); return m === null ? null : m + sign * p[1]; });
}

function extendChart(chart, points) {
  const update = { x: [], y: [] }, indices = [];
  chart.traces.forEach(function (trace, index) {
    const added = points[trace.key];
    if (!added || !added.length) return;
    update.x.push(added.map(function (p) { return p[0]; }));
    update.y.push(addedYs(chart, trace, added));
    indices.push(index);
  });
  if (indices.length) Plotly.extendTraces(chart.div, update, indices);
}

// Append points that arrived since the last frame: Plotly.extendTraces when the chart's traces
// stay the same, a redraw when a new key appeared (or the stack, whose bars are sums).
function flush() {
  flushScheduled = false;
  const touched = new Map();
  let newKey = false;
  Object.keys(state.pending).forEach(function (key) {
    const chart = chartFor(key);
    if (!chart) { newKey = true; return; }
    if (!touched.has(chart)) touched.set(chart, {});
    touched.get(chart)[key] = state.pending[key];
  });
  state.pending = {};
  touched.forEach(function (points, chart) {
    if (structureChanged(chart, points)) drawChart(chart);
    else extendChart(chart, points);
  });
  if (newKey) renderPicker();
}

function scheduleFlush() {
  if (flushScheduled) return;
  flushScheduled = true;
  // requestAnimationFrame batches bursts; a hidden tab still gets its points when it is shown.
  window.requestAnimationFrame(flush);
}

function xOf(event) {
  if (state.xAxis === "time") return typeof event.time === "number" ? event.time * 1000 : null;
  if (state.xAxis === "tokens") return typeof event.tokens === "number" ? event.tokens : null;
  return event.step;
}

export function applyMetrics(event) {
  if (state.loading) { state.held.push(event); return; }
  const x = xOf(event);
  if (x === null || x === undefined) return;
  Object.keys(event.values || {}).forEach(function (key) {
    const y = event.values[key];
    if (typeof y !== "number") return;
    let s = state.series[key];
    if (!s) s = state.series[key] = { x: [], y: [] };
    // History and live overlap by design (docs/live.md): a point at or behind the curve's end is known.
    if (s.x.length && x <= s.x[s.x.length - 1]) return;
    s.x.push(x);
    s.y.push(y);
    (state.pending[key] = state.pending[key] || []).push([x, y]);
  });
  scheduleFlush();
}

function takeCurves(body) {
  state.series = {};
  let downsampled = 0;
  Object.keys(body.series).forEach(function (key) {
    const s = body.series[key];
    const xs = state.xAxis === "time" ? s.x.map(function (v) { return v * 1000; }) : s.x;
    state.series[key] = { x: xs, y: s.y.slice() };
    if (s.downsampled) downsampled++;
    if (key.indexOf(EVAL_PREFIX) === 0) evalChart(key);
  });
  // The first load fixes where the socket starts; later reloads (another x-axis) must not move it,
  // or log lines still in flight on the socket would be skipped after a reconnect.
  if (!state.following) state.lastSeq = Math.max(state.lastSeq, body.last_seq);
  ui.note.textContent = downsampled ? "long curves are shown downsampled (each bucket's min and max)" : "";
}

export function loadCurves() {
  state.loading = true;
  ui.note.textContent = "loading curves…";
  const url = root.dataset.metricsUrl + "?x=" + encodeURIComponent(state.xAxis) + "&max_points=2000";
  return getJson(url)
    .then(function (response) {
      if (!response.ok) throw new Error("metrics.json answered " + response.status);
      return response.json();
    })
    .then(function (body) {
      takeCurves(body);
      state.loading = false;
      if (state.xAxis === "step") noteEvaluationFromCurves(state.series);
      drawAll();
      const held = state.held;
      state.held = [];
      held.forEach(applyMetrics);
      return body;
    })
    .catch(function (error) {
      state.loading = false;
      ui.note.textContent = "could not load the curves: " + error.message;
    });
}

// The fixed charts' places on the page, and the controls above them.
export function startCharts() {
  CHARTS.forEach(function (spec) { charts.push(makeChart(Object.assign({ fixed: true }, spec), ui.charts)); });
  ui.smoothing.addEventListener("input", function () {
    state.alpha = Number(ui.smoothing.value) || 0;
    ui.smoothingValue.textContent = state.alpha.toFixed(2);
    drawAll();
  });
  ui.logScale.addEventListener("change", function () {
    state.logScale = ui.logScale.checked;
    drawAll();
  });
  ui.x.addEventListener("change", function () {
    state.xAxis = ui.x.value;
    loadCurves();
  });
  ui.metricSearch.addEventListener("input", renderPicker);
}
