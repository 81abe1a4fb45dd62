// Compare page: one metric of several runs overlaid; active runs keep growing over their websockets; a
// click on a point (x-axis: step) opens that step's groups in that point's run (static/js/curve_click.js).
// Protocol: docs/live.md. Run names and metric keys reach the DOM as text only, and Plotly's labels
// (legend, title, hover) through live.plotText, so a name that looks like markup stays text.
(function () {
  "use strict";
  const dataNode = document.getElementById("compare-runs");
  const chart = document.getElementById("compare-chart");
  if (!dataNode || !chart || !window.Plotly) return;

  const runs = JSON.parse(dataNode.textContent);
  const live = window.RolloutLive;  // static/js/live.js: the socket, status names, smoothing
  const FINAL = live.FINAL;
  const STATUS_NAMES = live.STATUS_NAMES;
  const ui = {
    metric: document.querySelector("[data-compare-metric]"),
    x: document.querySelector("[data-compare-x]"),
    smoothing: document.querySelector("[data-compare-smoothing]"),
    smoothingValue: document.querySelector("[data-compare-smoothing-value]"),
    note: document.querySelector("[data-compare-note]"),
    identical: document.querySelector("[data-compare-identical]"),
  };
  const state = { metric: ui.metric.value, xAxis: "step", alpha: 0, loading: true, generation: 0 };
  // Per run: its curve for the chosen metric, the origin of its time axis, the EMA's last value, its socket.
  runs.forEach(function (run) {
    run.series = { x: [], y: [] };
    run.t0 = null;
    run.lastSeq = null;
    run.held = [];
    run.emaLast = null;
  });
  window.websocketConnected = false;
  window.liveEventsReceived = 0;

  function ema(values) { return live.ema(values, state.alpha); }

  function xOf(run, event) {
    if (state.xAxis === "time") {
      // Runs started at different times: compare elapsed minutes since each run's first point.
      if (typeof event.time !== "number") return null;
      if (run.t0 === null) run.t0 = event.time;
      return (event.time - run.t0) / 60;
    }
    if (state.xAxis === "tokens") return typeof event.tokens === "number" ? event.tokens : null;
    return event.step;
  }

  // Each run its own dash and marker symbol: runs whose curves coincide (same seed, same config) stay
  // apart, and the note names them.
  const DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"];
  const SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "cross"];
  const charts = window.RolloutCharts;

  function sameCurve(a, b) {
    if (!a.x.length || a.x.length !== b.x.length) return false;
    for (let i = 0; i < a.x.length; i++) {
      if (a.x[i] !== b.x[i] || Math.abs(a.y[i] - b.y[i]) > 1e-12) return false;
    }
    return true;
  }

  function label(run) { return run.name + " (#" + run.id + ")"; }

  // "a (#1) is identical to b (#2)" for every run whose curve equals an earlier one's.
  function identicalNote() {
    const notes = [];
    runs.forEach(function (run, i) {
      for (let j = 0; j < i; j++) {
        if (sameCurve(runs[j].series, run.series)) { notes.push(label(run) + " is identical to " + label(runs[j])); break; }
      }
    });
    return notes.join("; ");
  }

  function xAxis() {
    const xTitle = { step: "step", time: "minutes since the run's first point", tokens: "tokens seen" }[state.xAxis];
    if (state.xAxis !== "step") return { title: { text: xTitle } };
    const bounds = charts.span(runs.map(function (run) { return run.series; }));
    return charts.stepAxis(bounds[0], bounds[1], 10);
  }

  function draw() {
    const traces = runs.map(function (run, index) {
      const smoothed = ema(run.series.y);
      run.emaLast = smoothed.length ? smoothed[smoothed.length - 1] : null;
      return { x: run.series.x.slice(), y: smoothed, name: live.plotText(label(run)), mode: charts.lineMode(run.series.x.length),
        line: { dash: DASHES[index % DASHES.length], width: 2 },
        marker: { symbol: SYMBOLS[index % SYMBOLS.length], size: 7 } };
    });
    const xaxis = xAxis();
    state.dtick = xaxis.dtick;
    state.range = xaxis.range;
    const yaxis = charts.isFraction(state.metric) ? { range: charts.fractionRange() } : {};
    const identical = identicalNote();
    ui.identical.textContent = identical;
    ui.identical.hidden = !identical;
    Plotly.react(chart, traces, charts.themed({
      title: { text: live.plotText(state.metric), font: { size: 14 } }, margin: { l: 56, r: 16, t: 40, b: 48 },
      xaxis: xaxis, yaxis: yaxis,
      hovermode: "x unified",
      // One entry per run, to the right of the plot: any number of runs fits without covering the
      // title or the x-axis title (plotly widens the margin for it).
      legend: { orientation: "v", x: 1.02, y: 1, xanchor: "left", yanchor: "top" },
      uirevision: state.metric + state.xAxis,
    }), { displaylogo: false, responsive: true });
    // From curve to cause: a point opens that step's groups in its run (eval groups for an eval metric).
    if (window.RolloutStepClick) {
      window.RolloutStepClick.bind(chart, {
        url: function (point) { const run = runs[point.curveNumber]; return run ? run.groups_url : null; },
        split: function () { return state.metric.indexOf("eval/") === 0 ? "eval" : ""; },
        enabled: function () { return state.xAxis === "step"; },
      });
    }
  }

  function setOptions(keys) {
    const current = state.metric;
    const all = Array.from(new Set(keys.concat([current]))).sort();
    ui.metric.textContent = "";
    all.forEach(function (key) {
      const option = document.createElement("option");
      option.value = key;
      option.textContent = key;
      option.selected = key === current;
      ui.metric.appendChild(option);
    });
  }

  function load() {
    const generation = ++state.generation;
    state.loading = true;
    ui.note.textContent = "loading…";
    const query = "?keys=" + encodeURIComponent(state.metric) + "&x=" + state.xAxis + "&max_points=2000";
    return Promise.all(runs.map(function (run) {
      return fetch(run.metrics_url + query, { credentials: "same-origin" })
        .then(function (response) { if (!response.ok) throw new Error(run.name + ": " + response.status); return response.json(); });
    })).then(function (bodies) {
      if (generation !== state.generation) return;  // a newer choice is loading
      const keys = [];
      let downsampled = false;
      bodies.forEach(function (body, index) {
        const run = runs[index];
        const s = body.series[state.metric] || { x: [], y: [] };
        run.t0 = state.xAxis === "time" && s.x.length ? s.x[0] : null;
        const xs = state.xAxis === "time" ? s.x.map(function (v) { return (v - run.t0) / 60; }) : s.x;
        run.series = { x: xs, y: s.y.slice() };
        if (run.lastSeq === null) run.lastSeq = body.last_seq;
        downsampled = downsampled || Boolean(s.downsampled);
        body.keys.forEach(function (key) { if (keys.indexOf(key) === -1) keys.push(key); });
      });
      setOptions(keys);
      ui.note.textContent = downsampled ? "long curves are downsampled (each bucket's min and max)" : "";
      state.loading = false;
      draw();
      runs.forEach(function (run) {
        const held = run.held;
        run.held = [];
        held.forEach(function (event) { addPoint(run, event); });
      });
    }).catch(function (error) {
      state.loading = false;
      ui.note.textContent = "could not load: " + error.message;
    });
  }

  function addPoint(run, event) {
    if (state.loading) { run.held.push(event); return; }
    const y = event.values && event.values[state.metric];
    const x = xOf(run, event);
    if (typeof y !== "number" || x === null || x === undefined) return;
    const s = run.series;
    if (s.x.length && x <= s.x[s.x.length - 1]) return;  // already in the loaded history
    s.x.push(x);
    s.y.push(y);
    run.emaLast = live.emaStep(run.emaLast, y, state.alpha);
    const axis = xAxis();
    if (axis.dtick !== state.dtick || String(axis.range) !== String(state.range) || s.x.length === 1 ||
        charts.lineMode(s.x.length) !== charts.lineMode(s.x.length - 1) || identicalNote() !== ui.identical.textContent) {
      draw();  // another axis, markers off, or a change in which curves coincide
      return;
    }
    Plotly.extendTraces(chart, { x: [[x]], y: [[run.emaLast]] }, [runs.indexOf(run)]);
  }

  function setStatus(run, status) {
    run.status = status;
    document.querySelectorAll('[data-compare-status="' + run.id + '"]').forEach(function (badge) {
      badge.className = "badge status-" + status;
      badge.textContent = STATUS_NAMES[status] || status;
    });
  }

  function follow(run) {
    live.followRun({
      path: run.ws_path,
      lastSeq: function () { return run.lastSeq; },
      onSnapshot: function (data) { setStatus(run, data.run.status); },
      onEvent: function (event) {
        if (typeof event.seq === "number" && event.seq > run.lastSeq) run.lastSeq = event.seq;
        if (event.type === "metrics") addPoint(run, event);
        else if (event.type === "status") setStatus(run, event.status);
      },
      isFinal: function () { return FINAL.indexOf(run.status) !== -1; },
    });
  }

  ui.metric.addEventListener("change", function () { state.metric = ui.metric.value; load(); });
  ui.x.addEventListener("change", function () { state.xAxis = ui.x.value; load(); });
  ui.smoothing.addEventListener("input", function () {
    state.alpha = Number(ui.smoothing.value) || 0;
    ui.smoothingValue.textContent = state.alpha.toFixed(2);
    draw();
  });

  load().then(function () {
    runs.forEach(function (run) { if (run.active) follow(run); });
  });
})();
