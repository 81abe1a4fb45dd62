// Run page, async-health panel (templates/live/_async_health.html): four charts from what the run stored.
// 1. per step, a stacked bar of the time spent generating, scoring, learning, syncing weights and the rest
//    ("other": step_time minus the phases; the phases group the time/* metrics as trainers.sdk.wire.STEP_TIME_PARTS
//    says); 2. tokens/s; 3. a histogram of the trained samples' staleness; 4. the truncated and aborted share
//    of each step's samples. Clicking a step opens that step's groups (best and worst sample of each:
//    static/js/curve_click.js, shared with the live step curves).
// Drawn once when the page opens and again every 15 s while the run is active. An ES module the run page's
// entry (static/js/run_live.js) starts. The stack is step_time.js's, as on the run page's own chart.
import { PHASE_COLOURS, stackTraces, stepTimeKeys } from "./step_time.js";

export function startAsyncHealth() {
  const root = document.querySelector("[data-async-health]");
  if (!root || !window.Plotly) return;
  const charts = {};
  root.querySelectorAll("[data-async-health-chart]").forEach(function (div) { charts[div.dataset.asyncHealthChart] = div; });
  const empty = root.querySelector("[data-async-health-empty]");
  const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  const theme = window.RolloutCharts;
  const themed = theme ? theme.themed : function (layout) { return layout; };

  // The legend sits between the title and the plot (below it, it ran into the x-axis title).
  function layout(title, extra) {
    return Object.assign({ title: { text: title, font: { size: 13 }, yref: "container", y: 1, yanchor: "top", pad: { t: 8 } },
      height: 240, margin: { l: 48, r: 12, t: 56, b: 40 }, showlegend: true,
      legend: { orientation: "h", x: 0, y: 1, xanchor: "left", yanchor: "bottom", font: { size: 11 } } }, extra || {});
  }

  // Plotly.react with the theme; a chart with nothing to show says "no points yet" (no invented axes).
  function plot(div, traces, chartLayout, hasPoints) {
    const full = hasPoints || !theme ? chartLayout : theme.noPoints(chartLayout);
    Plotly.react(div, hasPoints ? traces : [], themed(full), CONFIG);
    div.dataset.points = hasPoints ? "yes" : "none";
  }

  // Whole-step ticks, as every chart of steps has them (RolloutCharts.stepAxis).
  function stepAxis(xs) {
    if (!theme || !xs.length) return { title: { text: "step" } };
    return theme.stepAxis(Math.min.apply(null, xs), Math.max.apply(null, xs));
  }

  function draw(metrics, health) {
    const series = metrics.series || {};
    const steps = ((series.step_time || {}).x || []);
    empty.hidden = steps.length > 0 || health.steps.length > 0;
    plot(charts.timeline, stackTraces(series), layout("Step time by phase (s)", { barmode: "stack",
      xaxis: stepAxis(steps) }), steps.length > 0);

    const tokens = series.tokens_per_s || { x: [], y: [] };
    plot(charts.throughput, [{ type: "scatter", mode: "lines+markers", name: "tokens/s", x: tokens.x, y: tokens.y }],
      layout("Generation tokens / s", { showlegend: false, margin: { l: 48, r: 12, t: 32, b: 40 },
        xaxis: stepAxis(tokens.x) }), tokens.x.length > 0);

    plot(charts.staleness, [{ type: "bar", name: "samples",
      x: health.staleness.map(function (p) { return p[0]; }), y: health.staleness.map(function (p) { return p[1]; }),
      hovertemplate: "%{y} samples %{x} versions behind<extra></extra>" }],
      layout("Staleness of trained samples", { showlegend: false, margin: { l: 48, r: 12, t: 32, b: 40 },
        xaxis: { title: { text: "policy versions behind" }, dtick: 1 } }), health.staleness.length > 0);

    plot(charts.share, [
      { type: "scatter", mode: "lines+markers", name: "truncated", x: health.steps, y: health.truncated, marker: { color: PHASE_COLOURS.score } },
      { type: "scatter", mode: "lines+markers", name: "aborted (error)", x: health.steps, y: health.aborted, marker: { color: "#e03131" } },
    ], layout("Truncated / aborted share", { yaxis: { tickformat: ".0%", rangemode: "tozero" }, xaxis: stepAxis(health.steps) }),
      health.steps.length > 0);

    [charts.timeline, charts.throughput, charts.share].forEach(function (div) {
      if (window.RolloutStepClick) window.RolloutStepClick.bind(div, { url: root.dataset.groupsUrl });
    });
    root.dataset.drawn = String(steps.length);
  }

  function load() {
    const keys = stepTimeKeys().concat(["tokens_per_s"]);
    Promise.all([
      fetch(root.dataset.metricsUrl + "?x=step&keys=" + encodeURIComponent(keys.join(",")), { credentials: "same-origin" }).then(function (r) { return r.json(); }),
      fetch(root.dataset.healthUrl, { credentials: "same-origin" }).then(function (r) { return r.json(); }),
    ]).then(function (answers) { draw(answers[0], answers[1]); }).catch(function () { empty.textContent = "Could not load the async-health charts."; empty.hidden = false; });
  }

  load();
  const live = document.querySelector("[data-status]");
  if (live && ["QUEUED", "STARTING", "RUNNING"].indexOf(live.dataset.status) >= 0) window.setInterval(load, 15000);
}
