// Distributions per step: a heatmap of the reward (or response length) of each step's trajectories
// (histograms.json), redrawn at most every HISTOGRAM_DELAY_MS as trajectories arrive; a click on a cell
// lists that cell's trajectories in the feed (bin.json).
import { PLOT_CONFIG } from "./chart_specs.js";
import { getJson } from "./dom.js";
import { showFiltered } from "./feed.js";
import { chartTheme, live, root, state, ui } from "./state.js";

const HISTOGRAM_DELAY_MS = 1500;  // new trajectories redraw the histogram at most this often
const histogram = { body: null, timer: null, bound: false };

function histogramLabel(field) { return field === "length" ? "response length" : "reward"; }
function splitName(split) { return split === "eval" ? "evaluation" : "training"; }

export function loadHistogram() {
  const field = ui.histogramField.value, split = ui.histogramSplit.value;
  const url = root.dataset.histogramsUrl + "?field=" + field + "&split=" + split + "&bins=20";
  return getJson(url)
    .then(function (response) { return response.ok ? response.json() : null; })
    .then(function (body) {
      if (!body || field !== ui.histogramField.value || split !== ui.histogramSplit.value) return;
      histogram.body = body;
      drawHistogram();
    })
    .catch(function () { /* the next trajectories event tries again */ });
}

export function scheduleHistogram() {
  if (histogram.timer !== null) return;
  histogram.timer = window.setTimeout(function () { histogram.timer = null; loadHistogram(); }, HISTOGRAM_DELAY_MS);
}

function heatmapTrace(body) {
  const edges = body.edges;
  const centres = edges.slice(0, -1).map(function (e, i) { return (e + edges[i + 1]) / 2; });
  const z = centres.map(function (_, b) { return body.counts.map(function (column) { return column[b] || 0; }); });
  return {
    type: "heatmap", x: body.steps, y: centres, z: z, colorscale: chartTheme.heatScale(), xgap: 1, ygap: 1,
    zmin: 0, colorbar: { title: { text: "trajectories" }, thickness: 12 },
    hovertemplate: "step %{x}<br>" + histogramLabel(body.field) + " ≈ %{y:.3g}<br>%{z} trajectories<extra></extra>",
  };
}

// The bins' axis spans every bin edge to edge, with a little room: the top and bottom rows are whole
// cells (an autorange around the centres, kept by uirevision while new bins arrived, cut the top row).
function binAxis(edges, label) {
  const lo = edges[0], hi = edges[edges.length - 1];
  const pad = 0.02 * ((hi - lo) || 1);
  return { title: { text: live.plotText(label) }, range: [lo - pad, hi + pad], autorange: false };
}

function drawHistogram() {
  const body = histogram.body;
  const div = ui.histogram;
  if (!body.steps.length) {
    div.hidden = true;
    ui.histogramNote.textContent = "no " + splitName(body.split) + " trajectories yet";
    return;
  }
  div.hidden = false;
  ui.histogramNote.textContent = "click a cell to list its trajectories in the feed" +
    (body.stride > 1 ? " · each column is " + body.stride + " steps" : "");
  const label = histogramLabel(body.field);
  const xaxis = chartTheme.stepAxis(body.steps[0], body.steps[body.steps.length - 1]);
  delete xaxis.range;  // a heatmap's cells already span their steps
  Plotly.react(div, [heatmapTrace(body)], chartTheme.themed({
    title: { text: live.plotText(label[0].toUpperCase() + label.slice(1) + " per step (" + splitName(body.split) + ")"),
      font: { size: 13 } },
    margin: { l: 56, r: 14, t: 36, b: 40 }, xaxis: xaxis, yaxis: binAxis(body.edges, label),
    uirevision: body.field + body.split,
  }), PLOT_CONFIG);
  if (!histogram.bound) {
    histogram.bound = true;
    div.on("plotly_click", function (event) {
      const point = event.points && event.points[0];
      if (point) filterByCell(point.x, point.y);
    });
  }
}

// A click on the histogram: list that cell's trajectories in the feed, and link the explorer to them.
function filterByCell(step, centre) {
  const body = histogram.body;
  const column = body.steps.indexOf(step);
  const edges = body.edges;
  const bin = edges.findIndex(function (e, i) { return i < edges.length - 1 && (e + edges[i + 1]) / 2 === centre; });
  if (column === -1 || bin === -1) return;
  const filter = {
    field: body.field, split: body.split, stepMin: step, stepMax: step + body.stride - 1,
    low: edges[bin], high: edges[bin + 1], last: bin === edges.length - 2,
  };
  state.binFilter = filter;
  const query = "?field=" + filter.field + "&split=" + filter.split + "&step_min=" + filter.stepMin +
    "&step_max=" + filter.stepMax + "&min=" + filter.low + "&max=" + filter.high + (filter.last ? "&last=1" : "");
  getJson(root.dataset.binUrl + query)
    .then(function (response) { return response.ok ? response.json() : { trajectories: [] }; })
    .then(function (answer) { if (state.binFilter === filter) showFiltered(filter, answer.trajectories); })
    .catch(function () { /* keep the feed as it was */ });
}

export function startHistogram() {
  ui.histogramField.addEventListener("change", loadHistogram);
  ui.histogramSplit.addEventListener("change", loadHistogram);
  loadHistogram();
}
