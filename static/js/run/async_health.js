// Run page, async-health panel (templates/live/_async_health.html): four charts from what the run stored.
// 1. per step, a stacked bar of the time spent generating, scoring, learning, syncing weights and waiting
//    (step_time minus the phases; the phases group the time/* metrics as trainers.sdk.wire.STEP_TIME_PARTS
//    says); 2. tokens/s; 3. a histogram of the trained samples' staleness; 4. the truncated and aborted share
//    of each step's samples. Clicking a step opens that step's groups (best and worst sample of each:
//    static/js/curve_click.js, shared with the live step curves).
// Drawn once when the page opens and again every 15 s while the run is active. An ES module the run page's
// entry (static/js/run_live.js) starts.

export function startAsyncHealth() {
  const root = document.querySelector("[data-async-health]");
  if (!root || !window.Plotly) return;
  const partsNode = document.getElementById("async-health-parts");
  const parts = partsNode ? JSON.parse(partsNode.textContent) : {};
  const charts = {};
  root.querySelectorAll("[data-async-health-chart]").forEach(function (div) { charts[div.dataset.asyncHealthChart] = div; });
  const empty = root.querySelector("[data-async-health-empty]");
  const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  const themed = window.RolloutCharts ? window.RolloutCharts.themed : function (layout) { return layout; };
  const COLOURS = { generate: "#4c6ef5", score: "#f59f00", learn: "#2f9e44", sync: "#ae3ec9", wait: "#adb5bd" };

  function layout(title, extra) {
    return themed(Object.assign({ title: { text: title, font: { size: 13 } }, height: 240,
      margin: { l: 48, r: 12, t: 32, b: 36 }, showlegend: true, legend: { orientation: "h", y: -0.25 } }, extra || {}));
  }

  function byStep(series) {
    const out = {};
    if (!series) return out;
    series.x.forEach(function (x, i) { out[x] = series.y[i]; });
    return out;
  }

  function draw(metrics, health) {
    const series = metrics.series || {};
    const stepTimes = byStep(series.step_time);
    const steps = Object.keys(stepTimes).map(Number).sort(function (a, b) { return a - b; });
    empty.hidden = steps.length > 0 || health.steps.length > 0;
    const phases = Object.keys(parts).map(function (name) {
      const columns = parts[name].map(function (part) { return byStep(series["time/" + part]); });
      return { name: name, y: steps.map(function (s) {
        return columns.reduce(function (sum, column) { return sum + (column[s] || 0); }, 0);
      }) };
    });
    const wait = steps.map(function (s, i) {
      const spent = phases.reduce(function (sum, phase) { return sum + phase.y[i]; }, 0);
      return Math.max(0, stepTimes[s] - spent);
    });
    phases.push({ name: "wait", y: wait });
    Plotly.react(charts.timeline, phases.map(function (phase) {
      return { type: "bar", name: phase.name, x: steps, y: phase.y, marker: { color: COLOURS[phase.name] },
        hovertemplate: "step %{x}: " + phase.name + " %{y:.2f} s<extra></extra>" };
    }), layout("Step time by phase (s)", { barmode: "stack", xaxis: { title: { text: "step" } } }), CONFIG);

    const tokens = series.tokens_per_s || { x: [], y: [] };
    Plotly.react(charts.throughput, [{ type: "scatter", mode: "lines+markers", name: "tokens/s", x: tokens.x, y: tokens.y }],
      layout("Generation tokens / s", { showlegend: false, xaxis: { title: { text: "step" } } }), CONFIG);

    Plotly.react(charts.staleness, [{ type: "bar", name: "samples",
      x: health.staleness.map(function (p) { return p[0]; }), y: health.staleness.map(function (p) { return p[1]; }),
      hovertemplate: "%{y} samples %{x} versions behind<extra></extra>" }],
      layout("Staleness of trained samples", { showlegend: false, xaxis: { title: { text: "policy versions behind" }, dtick: 1 } }), CONFIG);

    Plotly.react(charts.share, [
      { type: "scatter", mode: "lines+markers", name: "truncated", x: health.steps, y: health.truncated, marker: { color: COLOURS.score } },
      { type: "scatter", mode: "lines+markers", name: "aborted (error)", x: health.steps, y: health.aborted, marker: { color: "#e03131" } },
    ], layout("Truncated / aborted share", { yaxis: { tickformat: ".0%", rangemode: "tozero" }, xaxis: { title: { text: "step" } } }), CONFIG);

    [charts.timeline, charts.throughput, charts.share].forEach(function (div) {
      if (window.RolloutStepClick) window.RolloutStepClick.bind(div, { url: root.dataset.groupsUrl });
    });
    root.dataset.drawn = String(steps.length);
  }

  function load() {
    const keys = ["step_time", "tokens_per_s"].concat(Object.keys(parts).reduce(function (all, name) {
      return all.concat(parts[name].map(function (part) { return "time/" + part; }));
    }, []));
    Promise.all([
      fetch(root.dataset.metricsUrl + "?x=step&keys=" + encodeURIComponent(keys.join(",")), { credentials: "same-origin" }).then(function (r) { return r.json(); }),
      fetch(root.dataset.healthUrl, { credentials: "same-origin" }).then(function (r) { return r.json(); }),
    ]).then(function (answers) { draw(answers[0], answers[1]); }).catch(function () { empty.textContent = "Could not load the async-health charts."; empty.hidden = false; });
  }

  load();
  const live = document.querySelector("[data-status]");
  if (live && ["QUEUED", "STARTING", "RUNNING"].indexOf(live.dataset.status) >= 0) window.setInterval(load, 15000);
}
