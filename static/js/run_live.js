// Run page, live part: curves from metrics.json that grow with websocket events (Plotly.extendTraces),
// a rollout feed, a log tail, the status badge and progress. Protocol: docs/live.md.
// Model output is untrusted: every text from the server goes into the DOM through textContent.
(function () {
  "use strict";
  const root = document.getElementById("run-live");
  if (!root || !window.Plotly) return;

  const STATUS_NAMES = { QUEUED: "Queued", STARTING: "Starting", RUNNING: "Running", SUCCEEDED: "Succeeded",
    FAILED: "Failed", CANCELLED: "Cancelled", LOST: "Lost" };
  const FINAL = ["SUCCEEDED", "FAILED", "CANCELLED", "LOST"];
  const REFUSED = { 4401: "sign in again to follow this run", 4403: "not allowed", 4404: "run not found" };
  const CHARTS = [
    { id: "reward", title: "Reward (mean ± std)", keys: ["reward/mean"], band: "reward/std", always: true },
    { id: "criteria", title: "Rubric criteria", prefix: "criterion/" },
    { id: "kl", title: "KL to the reference", keys: ["kl"] },
    { id: "entropy", title: "Entropy", keys: ["entropy"] },
    { id: "clip", title: "Clip fraction", keys: ["clip_fraction"] },
    { id: "length", title: "Response length (tokens)", keys: ["response_length"] },
    { id: "turns", title: "Turns and tool calls", keys: ["turns", "tool_calls"] },
    { id: "zero", title: "Zero-variance group fraction", keys: ["zero_variance_fraction"] },
    { id: "step_time", title: "Step time (s)", keys: ["step_time"] },
    { id: "throughput", title: "Tokens / s", keys: ["tokens_per_s"] },
    { id: "loss", title: "Loss", keys: ["loss"] },
    { id: "eval", title: "Evaluation", prefix: "eval/" },
    { id: "other", title: "Other metrics", other: true },  // whatever a custom trainer reports
  ];
  const LOG_LINES = 200;
  const FEED_GROUPS = 24;
  const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  const el = function (selector) { return root.querySelector(selector); };
  const ui = {
    status: el("[data-live-status]"), cancel: el("[data-live-cancel]"), progress: el("[data-live-progress]"),
    step: el("[data-live-step]"), best: el("[data-live-best]"), connection: el("[data-live-connection]"),
    x: el("[data-live-x]"), smoothing: el("[data-live-smoothing]"), smoothingValue: el("[data-live-smoothing-value]"),
    note: el("[data-live-note]"), charts: el("[data-live-charts]"), feed: el("[data-live-feed]"),
    feedEmpty: el("[data-live-feed-empty]"), pause: el("[data-live-pause]"), pausedCount: el("[data-live-paused-count]"),
    log: el("[data-live-log]"),
  };

  const state = {
    xAxis: "step",
    alpha: 0,
    series: {},       // key -> {x: [], y: []}, x in the chosen axis' units (time: ms since epoch)
    lastSeq: 0,       // highest event seq applied: what a reconnect asks the server to start after
    loading: true,    // while curves reload, live metric events wait in `held`
    held: [],
    pending: {},      // key -> [[x, y], ...] waiting for the next animation frame
    status: root.dataset.status,
    currentStep: Number(root.dataset.currentStep) || 0,
    maxSteps: Number(root.dataset.maxSteps) || 0,
    best: null,
    logLines: [],
    paused: false,
    pausedGroups: [],
  };
  let socket = null;          // the current WebSocket
  let attempt = 0;            // reconnect attempts since the last open, for the backoff
  let stopped = false;        // refused by the server: do not reconnect
  let flushScheduled = false;
  window.websocketConnected = false;
  window.liveEventsReceived = 0;

  // --- charts --------------------------------------------------------------------------------------

  const charts = CHARTS.map(function (spec) {
    const div = document.createElement("div");
    div.className = "live-chart";
    div.id = "chart-" + spec.id;
    div.hidden = !spec.always;
    ui.charts.appendChild(div);
    return { spec: spec, div: div, traces: [], drawn: false };
  });

  function matches(spec, key) {
    return (spec.keys && spec.keys.indexOf(key) !== -1) || (spec.prefix && key.indexOf(spec.prefix) === 0) ||
      spec.band === key;
  }

  function chartFor(key) {
    for (const chart of charts) {
      if (!chart.spec.other && matches(chart.spec, key)) return chart;
    }
    return charts[charts.length - 1];
  }

  function chartKeys(chart) {
    const spec = chart.spec;
    if (spec.prefix || spec.other) {
      return Object.keys(state.series).filter(function (key) { return chartFor(key) === chart && key !== spec.band; }).sort();
    }
    return spec.keys;
  }

  function ema(values, alpha) {
    if (!alpha) return values.slice();
    const out = new Array(values.length);
    let last = null;
    for (let i = 0; i < values.length; i++) {
      last = last === null ? values[i] : alpha * last + (1 - alpha) * values[i];
      out[i] = last;
    }
    return out;
  }

  // Linear interpolation of a sorted series at x (the std band's own x positions need the mean there).
  function interpolate(series, x) {
    const xs = series.x;
    if (!xs.length) return null;
    let lo = 0, hi = xs.length - 1;
    if (x <= xs[0]) return series.y[0];
    if (x >= xs[hi]) return series.y[hi];
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (xs[mid] <= x) lo = mid; else hi = mid;
    }
    const t = (x - xs[lo]) / ((xs[hi] - xs[lo]) || 1);
    return series.y[lo] + t * (series.y[hi] - series.y[lo]);
  }

  function bandPoints(meanSeries, stdSeries) {
    const xs = [], upper = [], lower = [];
    for (let i = 0; i < stdSeries.x.length; i++) {
      const mean = interpolate(meanSeries, stdSeries.x[i]);
      if (mean === null) continue;
      xs.push(stdSeries.x[i]);
      upper.push(mean + stdSeries.y[i]);
      lower.push(mean - stdSeries.y[i]);
    }
    return { x: xs, upper: upper, lower: lower };
  }

  function xAxisLayout() {
    if (state.xAxis === "time") return { type: "date", title: { text: "time" } };
    return { title: { text: state.xAxis === "tokens" ? "tokens seen" : "step" } };
  }

  // How many rows a horizontal legend of these names takes in `width` pixels (about 6.5 px a
  // character at 11 px plus the sample line), so the top margin can make room for them.
  function legendRows(names, width) {
    let rows = 1, used = 0;
    names.forEach(function (name) {
      const entry = 40 + 6.5 * String(name || "").length;
      if (used > 0 && used + entry > width) { rows += 1; used = 0; }
      used += entry;
    });
    return rows;
  }

  // Full redraw of one chart (first data, a new key, another axis or smoothing): Plotly.react.
  function drawChart(chart) {
    const keys = chartKeys(chart);
    const traces = [], data = [];
    const smoothing = state.alpha > 0;
    keys.forEach(function (key) {
      const s = state.series[key] || { x: [], y: [] };
      const label = chart.spec.prefix ? key.slice(chart.spec.prefix.length) : key;
      if (smoothing) {
        traces.push({ key: key, kind: "raw" });
        data.push({ x: s.x.slice(), y: s.y.slice(), name: label + " (raw)", mode: "lines", showlegend: false,
          hoverinfo: "skip", line: { width: 1 }, opacity: 0.25, legendgroup: key });
      }
      traces.push({ key: key, kind: "line" });
      data.push({ x: s.x.slice(), y: ema(s.y, state.alpha), name: label, mode: "lines", legendgroup: key,
        line: { width: 2 } });
    });
    if (chart.spec.band && state.series[chart.spec.band] && state.series[keys[0]]) {
      const band = bandPoints(state.series[keys[0]], state.series[chart.spec.band]);
      traces.push({ key: chart.spec.band, kind: "upper" }, { key: chart.spec.band, kind: "lower" });
      data.push({ x: band.x, y: band.upper, mode: "lines", line: { width: 0 }, showlegend: false, hoverinfo: "skip" });
      data.push({ x: band.x, y: band.lower, mode: "lines", line: { width: 0 }, fill: "tonexty",
        fillcolor: "rgba(59, 91, 219, 0.15)", name: "± std", hoverinfo: "skip" });
    }
    chart.traces = traces;
    chart.emaLast = {};
    keys.forEach(function (key) {
      const smoothed = ema((state.series[key] || { y: [] }).y, state.alpha);
      chart.emaLast[key] = smoothed.length ? smoothed[smoothed.length - 1] : null;
    });
    const hasData = keys.some(function (k) { return state.series[k] && state.series[k].x.length; });
    chart.div.hidden = !(hasData || chart.spec.always);
    if (chart.div.hidden) return;
    const showlegend = keys.length > 1 || Boolean(chart.spec.band);
    const names = data.filter(function (t) { return t.showlegend !== false; }).map(function (t) { return t.name; });
    const rows = showlegend ? legendRows(names, (chart.div.clientWidth || 560) - 64) : 0;
    const layout = {
      // The title keeps to the top of the figure and the legend sits between it and the plot, with
      // room made for as many legend rows as the names need (below the plot it hit the x-axis title).
      title: { text: chart.spec.title, font: { size: 13 }, yref: "container", y: 1, yanchor: "top", pad: { t: 8 } },
      margin: { l: 50, r: 14, t: 34 + 20 * rows, b: 40 },
      xaxis: xAxisLayout(), hovermode: "x unified", showlegend: showlegend,
      legend: { orientation: "h", x: 0, y: 1, xanchor: "left", yanchor: "bottom", font: { size: 11 } },
      uirevision: state.xAxis,
    };
    Plotly.react(chart.div, data, layout, PLOT_CONFIG);
    chart.drawn = true;
  }

  function drawAll() {
    charts.forEach(drawChart);
  }

  // Append points that arrived since the last frame: Plotly.extendTraces when the chart's traces
  // stay the same, a redraw when a new key appeared.
  function flush() {
    flushScheduled = false;
    const touched = new Map();
    Object.keys(state.pending).forEach(function (key) {
      const chart = chartFor(key);
      if (chart) {
        if (!touched.has(chart)) touched.set(chart, {});
        touched.get(chart)[key] = state.pending[key];
      }
    });
    state.pending = {};
    touched.forEach(function (points, chart) {
      const structureChanged = !chart.drawn || chart.div.hidden ||
        chartKeys(chart).some(function (k) { return !chart.traces.some(function (t) { return t.key === k; }); }) ||
        (chart.spec.band && points[chart.spec.band] && !chart.traces.some(function (t) { return t.kind === "upper"; }));
      if (structureChanged) { drawChart(chart); return; }
      const update = { x: [], y: [] }, indices = [];
      chart.traces.forEach(function (trace, index) {
        const added = points[trace.key];
        if (!added || !added.length) return;
        let ys;
        if (trace.kind === "raw") {
          ys = added.map(function (p) { return p[1]; });
        } else if (trace.kind === "line") {
          let last = chart.emaLast[trace.key];
          ys = added.map(function (p) {
            last = last === null || last === undefined || !state.alpha ? p[1] : state.alpha * last + (1 - state.alpha) * p[1];
            return last;
          });
          chart.emaLast[trace.key] = last;
        } else {
          const mean = state.series[chart.spec.keys[0]];
          const sign = trace.kind === "upper" ? 1 : -1;
          ys = added.map(function (p) { const m = interpolate(mean, p[0]); return m === null ? null : m + sign * p[1]; });
        }
        update.x.push(added.map(function (p) { return p[0]; }));
        update.y.push(ys);
        indices.push(index);
      });
      if (indices.length) Plotly.extendTraces(chart.div, update, indices);
    });
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

  function applyMetrics(event) {
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

  function loadCurves() {
    state.loading = true;
    ui.note.textContent = "loading curves…";
    const url = root.dataset.metricsUrl + "?x=" + encodeURIComponent(state.xAxis) + "&max_points=2000";
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("metrics.json answered " + response.status);
        return response.json();
      })
      .then(function (body) {
        state.series = {};
        let downsampled = 0;
        Object.keys(body.series).forEach(function (key) {
          const s = body.series[key];
          const xs = state.xAxis === "time" ? s.x.map(function (v) { return v * 1000; }) : s.x;
          state.series[key] = { x: xs, y: s.y.slice() };
          if (s.downsampled) downsampled++;
        });
        // The first load fixes where the socket starts; later reloads (another x-axis) must not move it,
        // or log lines still in flight on the socket would be skipped after a reconnect.
        if (!socket) state.lastSeq = Math.max(state.lastSeq, body.last_seq);
        ui.note.textContent = downsampled ? "long curves are shown downsampled (each bucket's min and max)" : "";
        state.loading = false;
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

  // --- status, progress, log, feed ---------------------------------------------------------------

  function setStatus(status) {
    if (!status) return;
    state.status = status;
    // The live part's badge and the page header's (rendered before the run moved on).
    document.querySelectorAll("[data-live-status], [data-run-status]").forEach(function (badge) {
      badge.className = "badge status-" + status;
      badge.textContent = STATUS_NAMES[status] || status;
    });
    if (FINAL.indexOf(status) !== -1) {
      ui.cancel.hidden = true;
      document.querySelectorAll("[data-run-cancel]").forEach(function (form) { form.hidden = true; });
    }
  }

  // A failure (or a lost worker) while the page is open: show its message (as text — it may quote
  // model output); the traceback is on the page after a reload.
  function setError(message) {
    if (!message) return;
    document.querySelectorAll("[data-run-error]").forEach(function (node) { node.textContent = message; });
    document.querySelectorAll("[data-run-error-panel]").forEach(function (panel) { panel.hidden = false; });
  }

  // The header's Started / Finished cells were rendered with the page; fill them as the run moves on.
  // Same format as the template's (UTC, the server's TIME_ZONE).
  function setTimes(source) {
    ["started_at", "finished_at"].forEach(function (name) {
      if (!source[name]) return;
      const when = new Date(source[name]);
      if (isNaN(when.getTime())) return;
      document.querySelectorAll("[data-run-" + name + "]").forEach(function (cell) {
        cell.textContent = when.toISOString().replace("T", " ").slice(0, 19);
      });
    });
  }

  function setProgress(step) {
    if (typeof step === "number" && step > state.currentStep) state.currentStep = step;
    const max = state.maxSteps;
    const ratio = max ? Math.min(1, state.currentStep / max) : 0;
    ui.progress.firstElementChild.style.width = (100 * ratio).toFixed(1) + "%";
    ui.progress.setAttribute("aria-valuenow", String(state.currentStep));
    ui.step.textContent = "step " + state.currentStep + " of " + max;
  }

  function setBest(value) {
    if (typeof value !== "number") return;
    if (state.best === null || value > state.best) {
      state.best = value;
      ui.best.textContent = value.toFixed(4);
    }
  }

  function clock(seconds) {
    if (typeof seconds !== "number") return "";
    return new Date(seconds * 1000).toISOString().slice(11, 19) + " ";
  }

  function addLogLine(line) {
    const box = ui.log;
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 20;
    state.logLines.push(line);
    if (state.logLines.length > LOG_LINES) state.logLines.splice(0, state.logLines.length - LOG_LINES);
    box.textContent = state.logLines.join("\n");
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  function logEvent(event) {
    if (event.type === "log") {
      addLogLine(clock(event.time) + "[" + (event.level || "info") + "] " + event.message);
    } else if (event.type === "checkpoint") {
      addLogLine(clock(event.time) + "[checkpoint] step " + event.step + " saved to " + event.path);
    } else if (event.type === "status") {
      addLogLine(clock(event.time) + "[status] " + event.status + (event.message ? ": " + event.message : ""));
    }
  }

  function text(tag, content, className) {
    const node = document.createElement(tag);
    node.textContent = content;
    if (className) node.className = className;
    return node;
  }

  function fmt(value) {
    return typeof value === "number" ? value.toFixed(3) : "—";
  }

  function sampleNode(sample, label, className) {
    const box = document.createElement("div");
    box.className = "sample " + className;
    const head = document.createElement("div");
    head.appendChild(text("span", label + " ", "label"));
    if (typeof sample.id === "number") {
      const link = document.createElement("a");
      link.href = root.dataset.trajectoryBase + encodeURIComponent(String(sample.id)) + "/";
      link.textContent = "#" + sample.sample;
      head.appendChild(link);
    }
    box.appendChild(head);
    const detail = document.createElement("div");
    detail.appendChild(text("strong", "reward " + fmt(sample.reward)));
    const parts = (sample.components || []).map(function (c) { return c.name + " " + fmt(c.weighted); });
    if (parts.length) detail.appendChild(text("span", " · " + parts.join(" · "), "muted small"));
    box.appendChild(detail);
    box.appendChild(text("pre", sample.final || "(no final answer)"));
    return box;
  }

  function groupNode(step, group) {
    const item = document.createElement("li");
    const head = document.createElement("div");
    head.className = "head";
    head.appendChild(text("span", "step " + step + " · " + group.split + " group " + group.group + " · "));
    head.appendChild(text("code", group.task_id));
    head.appendChild(text("span", " · mean " + fmt(group.mean) + " ± " + fmt(group.std) + " · " + group.size + " samples "));
    if (group.zero_variance) {
      const flag = text("span", "zero variance: no learning signal", "badge zero");
      flag.title = "Every sample got the same reward, so every advantage is 0.";
      head.appendChild(flag);
    }
    item.appendChild(head);
    if (group.best) item.appendChild(sampleNode(group.best, "best", "best"));
    if (group.worst && (!group.best || group.worst.id !== group.best.id)) {
      item.appendChild(sampleNode(group.worst, "worst", "worst"));
    }
    return item;
  }

  function showGroups(entries) {
    if (!entries.length) return;
    if (ui.feedEmpty) { ui.feedEmpty.remove(); ui.feedEmpty = null; }
    entries.forEach(function (entry) {
      ui.feed.insertBefore(groupNode(entry.step, entry.group), ui.feed.firstChild);
    });
    while (ui.feed.children.length > FEED_GROUPS) ui.feed.removeChild(ui.feed.lastChild);
  }

  function feedEvent(event) {
    const entries = (event.groups || []).map(function (group) { return { step: event.step, group: group }; });
    if (state.paused) {
      state.pausedGroups = state.pausedGroups.concat(entries).slice(-FEED_GROUPS);
      ui.pausedCount.textContent = "(" + state.pausedGroups.length + " new)";
      return;
    }
    showGroups(entries);
  }

  ui.pause.addEventListener("change", function () {
    state.paused = ui.pause.checked;
    if (!state.paused) {
      showGroups(state.pausedGroups);
      state.pausedGroups = [];
      ui.pausedCount.textContent = "";
    }
  });

  // --- events ------------------------------------------------------------------------------------------

  function applyEvent(event) {
    if (typeof event.seq === "number" && event.seq > state.lastSeq) state.lastSeq = event.seq;
    switch (event.type) {
      case "metrics":
        applyMetrics(event);
        setProgress(event.step);
        if (event.values) setBest(event.values["reward/mean"]);
        break;
      case "trajectories":
        feedEvent(event);
        break;
      case "status":
        setStatus(event.status);
        setTimes(event);
        setError(event.error);
        if (event.seq !== undefined) logEvent(event);
        break;
      case "cancel_requested":
        if (FINAL.indexOf(state.status) === -1) ui.cancel.hidden = false;
        break;
      case "log":
      case "checkpoint":
        logEvent(event);
        break;
    }
  }

  function applySnapshot(message) {
    const run = message.run;
    setStatus(run.status);
    setTimes(run);
    setError(run.error_message);
    state.maxSteps = run.max_steps || state.maxSteps;
    setProgress(run.current_step);
    setBest(run.best_reward);
    ui.cancel.hidden = !(run.cancel_requested && FINAL.indexOf(run.status) === -1);
    if (message.replay && message.replay.truncated) {
      // Too much was missed to replay over the socket: reload the curves over HTTP.
      loadCurves();
    }
  }

  // --- the socket, with reconnect and resume ------------------------------------------------------------

  function setConnection(label, className) {
    ui.connection.textContent = label;
    ui.connection.className = "connection small " + className;
  }

  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const url = scheme + window.location.host + root.dataset.wsPath + "?last_seq=" + state.lastSeq;
    socket = new WebSocket(url);
    socket.addEventListener("open", function () {
      attempt = 0;
      window.websocketConnected = true;
      setConnection("live", "ok");
    });
    socket.addEventListener("message", function (message) {
      let data;
      try { data = JSON.parse(message.data); } catch (error) { return; }
      if (data.type === "event") {
        window.liveEventsReceived += 1;
        applyEvent(data.event);
      } else if (data.type === "snapshot") {
        applySnapshot(data);
      }
    });
    socket.addEventListener("close", function (event) {
      window.websocketConnected = false;
      if (REFUSED[event.code]) {
        stopped = true;
        setConnection("not live: " + REFUSED[event.code], "refused");
        return;
      }
      if (FINAL.indexOf(state.status) !== -1) {
        setConnection("run finished", "muted");
        return;
      }
      // Back off: 0.5 s, 1 s, 2 s … up to 30 s, with jitter so a restarted server is not stampeded.
      const delay = Math.min(30000, 500 * Math.pow(2, attempt)) * (0.75 + Math.random() * 0.5);
      attempt += 1;
      setConnection("reconnecting in " + Math.round(delay / 1000) + " s…", "down");
      window.setTimeout(function () { if (!stopped) connect(); }, delay);
    });
  }

  // --- controls ---------------------------------------------------------------------------------------

  ui.smoothing.addEventListener("input", function () {
    state.alpha = Number(ui.smoothing.value) || 0;
    ui.smoothingValue.textContent = state.alpha.toFixed(2);
    drawAll();
  });

  ui.x.addEventListener("change", function () {
    state.xAxis = ui.x.value;
    loadCurves();
  });

  function loadRecent(type, limit) {
    const url = root.dataset.eventsUrl + "?type=" + type + "&limit=" + limit + "&until_seq=" + state.lastSeq;
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : { events: [] }; })
      .then(function (body) { return body.events; })
      .catch(function () { return []; });
  }

  // Start: curves (which also fix the seq we resume from), then the recent log lines and rollout groups
  // up to that seq, then the socket for everything after it.
  setProgress(state.currentStep);
  loadCurves().then(function () {
    return Promise.all([loadRecent("log", LOG_LINES), loadRecent("trajectories", 4)]);
  }).then(function (recent) {
    recent[0].forEach(logEvent);
    recent[1].forEach(feedEvent);
    connect();
  });
})();
