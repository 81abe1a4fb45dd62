// Run page, live part: what the trainer is doing now (phase), curves from metrics.json that grow with
// websocket events (Plotly.extendTraces), evaluation small multiples, a metric picker, per-step histograms,
// a rollout feed (training and evaluation apart), a log tail — and every part of the page a status change
// alters (badges, actions, banners, timestamps, checkpoints), kept true from the snapshot and the status
// events (Run.page_state on the server). Protocol: docs/live.md.
// Model output and metric names are untrusted: text reaches the DOM through textContent and Plotly
// through live.plotText.
(function () {
  "use strict";
  const root = document.getElementById("run-live");
  if (!root || !window.Plotly) return;

  const live = window.RolloutLive;  // static/js/live.js: the socket, status names, smoothing, plotText
  const STATUS_NAMES = live.STATUS_NAMES;
  const FINAL = live.FINAL;
  const plotText = live.plotText;
  const chartTheme = window.RolloutCharts;  // static/js/charts.js: every layout's colours, light or dark
  // The fixed charts, in page order; a metric key belongs to the first chart that claims it. Keys no chart
  // claims (and that are not eval/…) are offered by the metric picker.
  const isDpo = root.dataset.kind === "dpo";  // DPO's own figures; no rollout reward to wait for
  const CHARTS = [
    { id: "reward", title: "Reward (mean ± std)", keys: ["reward/mean"], band: "reward/std", always: !isDpo },
    { id: "accuracy", title: "Accuracy", keys: ["accuracy"] },
    { id: "criteria", title: "Rubric criteria", prefix: "criterion/" },
    { id: "kl", title: "KL to the reference", keys: ["kl"] },
    { id: "entropy", title: "Entropy", keys: ["entropy"] },
    { id: "clip", title: "Clip fraction", keys: ["clip_fraction"] },
    { id: "length", title: "Response length (tokens)", keys: ["response_length"] },
    { id: "turns", title: "Turns and tool calls", keys: ["turns", "tool_calls"] },
    { id: "zero", title: "Zero-variance group fraction", keys: ["zero_variance_fraction"] },
    { id: "step_time", title: "Step time by phase (s)", keys: ["step_time"], prefix: "time/", stack: true },
    { id: "throughput", title: "Tokens / s", keys: ["tokens_per_s"] },
    { id: "loss", title: "Loss", keys: ["loss"] },
    // DPO runs (trainers/learn/dpo.py, TRL's names mapped in trainers/importers/trl.py).
    { id: "dpo_rewards", title: "DPO implicit reward: chosen vs rejected", keys: ["dpo/reward_chosen", "dpo/reward_rejected"], always: isDpo },
    { id: "dpo_margin", title: "DPO reward margin", keys: ["dpo/margin"], always: isDpo },
    { id: "dpo_accuracy", title: "DPO preference accuracy", keys: ["dpo/accuracy"], always: isDpo },
    { id: "staleness", title: "Staleness (policy versions behind)", keys: ["staleness/mean", "staleness/max"] },
    { id: "mismatch", title: "Log-prob mismatch (sampler vs learner)", prefix: "logprob_mismatch/" },
  ];
  // The step-time chart's stack: how the time/* metrics group into phases (trainers.sdk.wire.STEP_TIME_PARTS,
  // rendered into the page); "other" is the rest of step_time.
  const partsNode = document.getElementById("step-time-parts");
  const parts = partsNode ? JSON.parse(partsNode.textContent) : {};
  const STACK = Object.keys(parts).map(function (name) {
    return { name: name, keys: parts[name].map(function (part) { return "time/" + part; }) };
  });
  const EVAL_PREFIX = "eval/";
  const EVAL_FIRST = ["eval/accuracy", "eval/dpo/accuracy", "eval/reward/mean"];
  const LOG_LINES = 200;
  const FEED_GROUPS = 24;
  const HISTOGRAM_DELAY_MS = 1500;  // new trajectories redraw the histogram at most this often
  const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  const el = function (selector) { return root.querySelector(selector); };
  const ui = {
    status: el("[data-live-status]"), progress: el("[data-live-progress]"),
    step: el("[data-live-step]"), best: el("[data-live-best]"), connection: el("[data-live-connection]"),
    phase: el("[data-live-phase]"), phaseText: el("[data-live-phase-text]"),
    phaseProgress: el("[data-live-phase-progress]"), phaseElapsed: el("[data-live-phase-elapsed]"),
    x: el("[data-live-x]"), smoothing: el("[data-live-smoothing]"), smoothingValue: el("[data-live-smoothing-value]"),
    logScale: el("[data-live-log-scale]"), note: el("[data-live-note]"), charts: el("[data-live-charts]"),
    evalSection: el("[data-live-eval-section]"), evalCharts: el("[data-live-eval]"),
    metricSearch: el("[data-live-metric-search]"), metricList: el("[data-live-metric-list]"),
    metricCount: el("[data-live-metric-count]"), picked: el("[data-live-picked]"),
    histogram: el("[data-live-histogram]"), histogramField: el("[data-live-histogram-field]"),
    histogramSplit: el("[data-live-histogram-split]"), histogramNote: el("[data-live-histogram-note]"),
    feed: el("[data-live-feed]"), feedEmpty: el("[data-live-feed-empty]"),
    feedEval: el("[data-live-feed-eval]"), feedEvalEmpty: el("[data-live-feed-eval-empty]"),
    feedFiltered: el("[data-live-feed-filtered]"), feedFilter: el("[data-live-feed-filter]"),
    feedFilterText: el("[data-live-feed-filter-text]"), feedFilterExplorer: el("[data-live-feed-filter-explorer]"),
    feedFilterClear: el("[data-live-feed-filter-clear]"),
    evalLatest: el("[data-live-eval-latest]"), evalLatestStep: el("[data-live-eval-latest-step]"),
    evalLatestFigures: el("[data-live-eval-latest-figures]"),
    pause: el("[data-live-pause]"), pausedCount: el("[data-live-paused-count]"), log: el("[data-live-log]"),
  };

  const state = {
    xAxis: "step",
    alpha: 0,
    logScale: false,
    series: {},       // key -> {x: [], y: []}, x in the chosen axis' units (time: ms since epoch)
    lastSeq: 0,       // highest event seq applied: what a reconnect asks the server to start after
    loading: true,    // while curves reload, live metric events wait in `held`
    held: [],
    pending: {},      // key -> [[x, y], ...] waiting for the next animation frame
    status: root.dataset.status,
    cancelRequested: false,
    currentStep: Number(root.dataset.currentStep) || 0,
    maxSteps: Number(root.dataset.maxSteps) || 0,
    best: null,
    phase: null,
    checkpoints: new Map(),  // step -> Checkpoint.summary()
    logLines: 0,
    paused: false,
    pausedGroups: [],
    feedTab: "train",
    binFilter: null,
    latestEval: null,  // {step, values: {key: value}}: the newest evaluation's figures
  };
  let flushScheduled = false;
  window.websocketConnected = false;
  window.liveEventsReceived = 0;

  // --- the page's state: status, actions, banners, timestamps, checkpoints -----------------------------

  function isFinal() { return FINAL.indexOf(state.status) !== -1; }

  function setStatus(status) {
    if (!status) return;
    state.status = status;
    // The live part's badge and the page header's (rendered before the run moved on).
    document.querySelectorAll("[data-live-status], [data-run-status]").forEach(function (badge) {
      badge.className = "badge status-" + status;
      badge.textContent = STATUS_NAMES[status] || status;
    });
    if (isFinal()) setActions({ cancel: false });
    if (status !== "QUEUED") setQueue(null);  // a worker took it: the queue panel has said its piece
    showCancelRequested();
    showPhase();
  }

  function setCancelRequested(requested) {
    state.cancelRequested = Boolean(requested);
    showCancelRequested();
  }

  function showCancelRequested() {
    document.querySelectorAll("[data-live-cancel], [data-run-cancel-requested]").forEach(function (badge) {
      badge.hidden = !(state.cancelRequested && !isFinal());
    });
  }

  // Which buttons apply is the model's answer (Run.actions); the page only has the buttons the viewer's
  // role allows at all.
  function setActions(actions) {
    document.querySelectorAll("[data-run-action]").forEach(function (action) {
      const name = action.dataset.runAction;
      if (name in actions) action.hidden = !actions[name];
    });
  }

  // A failure (or a lost worker) while the page is open: show its message (as text — it may quote
  // model output); the traceback is on the page after a reload.
  function setError(message) {
    if (!message) return;
    document.querySelectorAll("[data-run-error]").forEach(function (node) { node.textContent = message; });
    document.querySelectorAll("[data-run-error-panel]").forEach(function (panel) { panel.hidden = false; });
  }

  // Same format as the template's (UTC, the server's TIME_ZONE): "Y-m-d H:i:s".
  function utc(iso, length) {
    const when = new Date(iso);
    return isNaN(when.getTime()) ? null : when.toISOString().replace("T", " ").slice(0, length);
  }

  function setTimes(source) {
    ["started_at", "finished_at", "heartbeat_at"].forEach(function (name) {
      if (!source[name]) return;
      const text = utc(source[name], 19);
      if (text === null) return;
      document.querySelectorAll("[data-run-" + name + "]").forEach(function (cell) { cell.textContent = text; });
    });
  }

  function setWorker(worker) {
    document.querySelectorAll("[data-run-worker]").forEach(function (cell) {
      cell.textContent = worker ? "on " + worker : "";
    });
  }

  // The checkpoints table (templates/experiments/run_detail.html), rebuilt from Checkpoint.summary().
  function drawCheckpoints() {
    drawStartLinks();
    const table = document.querySelector("[data-run-checkpoints]");
    const body = table && table.querySelector("tbody");
    if (!body) return;
    const columns = table.querySelectorAll("thead th").length;
    body.textContent = "";
    const rows = Array.from(state.checkpoints.values()).sort(function (a, b) { return a.step - b.step; });
    if (!rows.length) {
      const empty = document.createElement("tr");
      empty.dataset.runCheckpointsEmpty = "";
      const cell = text("td", "No checkpoints yet.", "muted");
      cell.colSpan = columns;
      empty.appendChild(cell);
      body.appendChild(empty);
      return;
    }
    rows.forEach(function (c) {
      const row = document.createElement("tr");
      row.dataset.checkpointStep = String(c.step);
      if (c.deleted) row.className = "muted";
      row.appendChild(text("td", String(c.step), "num"));
      const kind = text("td", c.kind || "full");
      if (c.deleted) { kind.appendChild(document.createTextNode(" ")); kind.appendChild(text("span", "pruned", "badge")); }
      row.appendChild(kind);
      // The key metrics as columns, already formatted by Checkpoint.summary() (4 significant digits).
      (c.key_metrics || []).forEach(function (value) { row.appendChild(text("td", value, "num metric")); });
      row.appendChild(text("td", c.metrics_text || "", "small"));
      row.appendChild(text("td", c.created_at ? utc(c.created_at, 16) || "" : "", "small"));
      const weights = text("td", "", "small");
      if (!c.deleted && c.id && table.dataset.downloadUrl) {
        const link = text("a", "safetensors");
        link.href = table.dataset.downloadUrl.replace(/\/0\/weights\/$/, "/" + c.id + "/weights/");
        link.setAttribute("download", "");
        link.dataset.checkpointDownload = "";
        weights.appendChild(link);
      }
      row.appendChild(weights);
      body.appendChild(row);
    });
  }

  // "Start a new GRPO-family run from a checkpoint's weights: step N" (researchers only), for the kept ones.
  function drawStartLinks() {
    const start = document.querySelector("[data-start-from-checkpoint]");
    const links = start && start.querySelector("[data-start-from-checkpoint-links]");
    if (!links) return;
    const kept = Array.from(state.checkpoints.values())
      .filter(function (c) { return !c.deleted && typeof c.id === "number"; })
      .sort(function (a, b) { return a.step - b.step; });
    links.textContent = "";
    kept.forEach(function (c, index) {
      if (index) links.appendChild(document.createTextNode(" · "));
      const link = text("a", "step " + c.step);
      link.href = start.dataset.runCreateUrl + "?from_checkpoint=" + encodeURIComponent(String(c.id));
      links.appendChild(link);
    });
    start.hidden = !kept.length;
  }

  function setCheckpoints(list) {
    state.checkpoints = new Map();
    list.forEach(function (c) { state.checkpoints.set(c.step, c); });
    drawCheckpoints();
  }

  function addCheckpoint(event) {
    if (typeof event.step !== "number") return;
    state.checkpoints.set(event.step, event);
    drawCheckpoints();
  }

  // Where a queued run stands (webapp.fleet.selectors.queue_states; templates/experiments/_run_queue.html
  // renders the same): from the snapshot and the server's seq-less `queue` messages sent when a run
  // ahead starts or ends or a worker of the queue comes or goes. Names travel as text, never as HTML.
  function setQueue(queue) {
    const panel = document.querySelector("[data-run-queue]");
    if (!panel) return;
    panel.hidden = !queue;
    if (!queue) return;
    panel.querySelector("[data-run-queue-position]").textContent =
      "Position " + queue.position + " on the " + queue.queue + " queue";
    const warning = panel.querySelector("[data-run-queue-warning]");
    warning.textContent = queue.warning || "";
    warning.hidden = !queue.warning;
    const ahead = panel.querySelector("[data-run-queue-ahead]");
    ahead.textContent = "";
    if (!queue.ahead_count) {
      ahead.textContent = "Nothing ahead: it starts as soon as a worker of the queue takes it.";
    } else {
      ahead.appendChild(document.createTextNode("Ahead: "));
      queue.ahead.forEach(function (row, index) {
        if (index) ahead.appendChild(document.createTextNode(", "));
        const link = text("a", row.name);
        link.href = row.url;
        ahead.appendChild(link);
        ahead.appendChild(document.createTextNode(" "));
        ahead.appendChild(text("span", "(" + String(row.status).toLowerCase() + ")", "muted"));
      });
      if (queue.ahead_unnamed) {
        ahead.appendChild(document.createTextNode((queue.ahead.length ? " and " : "") + queue.ahead_unnamed +
          " more run" + (queue.ahead_unnamed === 1 ? "" : "s") + " (other projects' runs are not named)"));
      }
      ahead.appendChild(document.createTextNode("."));
    }
    const workers = panel.querySelector("[data-run-queue-workers]");
    workers.textContent = "";
    if (!queue.workers.length) {
      workers.textContent = "No worker online serves this queue.";
    } else {
      workers.appendChild(document.createTextNode("Served by "));
      queue.workers.forEach(function (worker, index) {
        if (index) workers.appendChild(document.createTextNode(", "));
        workers.appendChild(document.createTextNode(worker.hostname + " "));
        workers.appendChild(text("span", worker.busy ? "(busy)" : "(idle)", "muted"));
      });
      workers.appendChild(document.createTextNode("."));
    }
  }

  // Run.peak_memory as templates/experiments/_peak_memory.html writes it.
  function peakMemoryText(peak) {
    if (!peak) return "—";
    const parts = [];
    if (typeof peak.rss_mb === "number") parts.push(peak.rss_mb + " MB resident");
    if (typeof peak.gpu_mb === "number") parts.push(peak.gpu_mb + " MB GPU");
    return parts.join(" · ") || "—";
  }

  function setPeakMemory(peak) {
    if (!peak) return;
    document.querySelectorAll("[data-run-peak-memory]").forEach(function (cell) {
      cell.textContent = peakMemoryText(peak);
    });
  }

  // The stalled badge (templates/experiments/_stalled_badge.html, in the header and the async-health
  // panel): Run.stall() — {since, for} or null — from the snapshot, every status change and the server's
  // heartbeat news, so it appears while the page is open and goes away when progress arrives.
  function setStall(stall) {
    document.querySelectorAll("[data-run-stalled]").forEach(function (badge) {
      badge.hidden = !stall;
      if (!stall) return;
      badge.textContent = "stalled: no progress for " + stall.for;
      const since = utc(stall.since, 19);
      if (since !== null) {
        badge.title = "The trainer still sends heartbeats but has reported no metrics, trajectories, "
          + "checkpoints or phase since " + since + ": it may be hung (generation, learner, a tool).";
      }
    });
  }

  // Everything Run.page_state() carries: sent with every status change and in the snapshot.
  function applyPageState(source) {
    if ("stall" in source) setStall(source.stall);
    if ("queue" in source) setQueue(source.queue);
    if ("peak_memory" in source) setPeakMemory(source.peak_memory);
    if ("cancel_requested" in source) state.cancelRequested = Boolean(source.cancel_requested);
    setStatus(source.status);
    setTimes(source);
    if ("worker" in source) setWorker(source.worker);
    if ("error_message" in source) setError(source.error_message);
    if (source.actions) setActions(source.actions);
    if (Array.isArray(source.checkpoints)) setCheckpoints(source.checkpoints);
  }

  // --- the run-level reward-hacking alarm (webapp.rollouts.selectors.run_hacking_alarm) ------------------

  // The header banner, from the snapshot and the server's seq-less hacking_alarm messages: shown when the
  // alarm starts while the page is open, hidden again if it clears (as a reload would render it). Its
  // pause button is a cancel action (data-run-action), shown while the run can be cancelled.
  function setHackingAlarm(alarm) {
    const banner = document.querySelector("[data-hacking-alarm]");
    if (!banner) return;
    banner.hidden = !alarm;
    const message = banner.querySelector("[data-hacking-alarm-message]");
    if (alarm && message) message.textContent = alarm.message;  // criterion names are user text
  }

  // --- phase: what the trainer is doing now --------------------------------------------------------------

  // Written as the template writes it (templates/live/run_live.html).
  function phaseText(phase) {
    let words = phase.phase.charAt(0).toUpperCase() + phase.phase.slice(1);
    if (typeof phase.step === "number") words += " · step " + phase.step;
    if (phase.message) words += " · " + phase.message;
    return words;
  }

  function setPhase(phase) {
    if (!phase || !phase.phase) return;
    // Replay and live overlap: never go back to an older phase.
    if (state.phase && typeof phase.seq === "number" && typeof state.phase.seq === "number" &&
        phase.seq < state.phase.seq) return;
    state.phase = phase;
    showPhase();
  }

  function showPhase() {
    const phase = state.phase;
    ui.phase.hidden = !phase || isFinal();
    if (ui.phase.hidden) return;
    ui.phaseText.textContent = phaseText(phase);
    const total = typeof phase.total === "number" ? phase.total : 0;
    const done = typeof phase.done === "number" ? phase.done : 0;
    ui.phaseProgress.hidden = !total;
    ui.phaseProgress.setAttribute("aria-valuemax", String(total));
    ui.phaseProgress.setAttribute("aria-valuenow", String(done));
    ui.phaseProgress.firstElementChild.style.width = (total ? (100 * Math.min(1, done / total)) : 0).toFixed(1) + "%";
    tickPhase();
  }

  function duration(seconds) {
    seconds = Math.max(0, Math.round(seconds));
    if (seconds < 60) return seconds + " s";
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + " min " + (seconds % 60) + " s";
    return Math.floor(minutes / 60) + " h " + (minutes % 60) + " min";
  }

  // The phase's clock: its start is the event's time minus the time already spent in it (the trainer's
  // clock; a browser whose clock is far off shows the time spent as reported).
  function tickPhase() {
    const phase = state.phase;
    if (!phase || ui.phase.hidden) return;
    const spent = typeof phase.elapsed_s === "number" ? phase.elapsed_s : 0;
    let elapsed = spent;
    if (typeof phase.time === "number") elapsed = Math.max(spent, Date.now() / 1000 - (phase.time - spent));
    ui.phaseElapsed.textContent = duration(elapsed);
  }
  window.setInterval(tickPhase, 1000);

  // --- charts ----------------------------------------------------------------------------------------------

  let chartCount = 0;

  function makeChart(spec, container) {
    const div = document.createElement("div");
    div.className = "live-chart";
    div.id = "chart-" + spec.id;
    if (spec.keys && spec.keys.length === 1 && !spec.fixed) div.dataset.key = spec.keys[0];
    div.hidden = !spec.always;
    container.appendChild(div);
    return { spec: spec, div: div, traces: [], drawn: false, emaLast: {} };
  }

  const charts = CHARTS.map(function (spec) { return makeChart(Object.assign({ fixed: true }, spec), ui.charts); });
  const evalCharts = new Map();    // key -> chart
  const pickedCharts = new Map();  // key -> chart

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

  const ema = live.ema;

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

  // The chart's x-axis; steps through RolloutCharts.stepAxis (static/js/charts.js): whole, unique ticks.
  function xAxisLayout(keys) {
    if (state.xAxis === "time") return { type: "date", title: { text: "time" } };
    if (state.xAxis === "tokens") return { title: { text: "tokens seen" }, tickformat: "~s" };
    const bounds = chartTheme.span(keys.map(function (key) { return state.series[key]; }));
    return chartTheme.stepAxis(bounds[0], bounds[1]);
  }

  // Whether the chart drawn with `axis` needs another axis (or markers) for its points now.
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

  // The step-time chart: time/* metrics grouped into phases and stacked per step.
  function stackTraces() {
    const byX = function (key) {
      const s = state.series[key], values = new Map();
      if (s) s.x.forEach(function (x, i) { values.set(x, s.y[i]); });
      return values;
    };
    const xs = new Set();
    const parts = STACK.map(function (part) {
      const columns = part.keys.map(byX);
      columns.forEach(function (column) { column.forEach(function (_, x) { xs.add(x); }); });
      return { name: part.name, columns: columns };
    });
    const total = byX("step_time");
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

  // Full redraw of one chart (first data, a new key, another axis, smoothing or scale): Plotly.react.
  function drawChart(chart) {
    const spec = chart.spec;
    const keys = chartKeys(chart);
    const traces = [], data = [];
    if (spec.stack) {
      stackTraces().forEach(function (trace) { data.push(trace); });
    } else {
      const smoothing = state.alpha > 0;
      keys.forEach(function (key) {
        const s = state.series[key] || { x: [], y: [] };
        const label = plotText(spec.prefix && key.indexOf(spec.prefix) === 0 ? key.slice(spec.prefix.length) : key);
        if (smoothing) {
          traces.push({ key: key, kind: "raw" });
          data.push({ x: s.x.slice(), y: s.y.slice(), name: label + " (raw)", mode: "lines", showlegend: false,
            hoverinfo: "skip", line: { width: 1 }, opacity: 0.25, legendgroup: key });
        }
        traces.push({ key: key, kind: "line" });
        data.push({ x: s.x.slice(), y: ema(s.y, state.alpha), name: label, mode: chartTheme.lineMode(s.x.length),
          legendgroup: key, line: { width: 2 }, marker: { size: 6 } });
      });
      if (spec.band && state.series[spec.band] && state.series[keys[0]]) {
        const band = bandPoints(state.series[keys[0]], state.series[spec.band]);
        traces.push({ key: spec.band, kind: "upper" }, { key: spec.band, kind: "lower" });
        data.push({ x: band.x, y: band.upper, mode: "lines", line: { width: 0 }, showlegend: false, hoverinfo: "skip" });
        data.push({ x: band.x, y: band.lower, mode: "lines", line: { width: 0 }, fill: "tonexty",
          fillcolor: "rgba(59, 91, 219, 0.15)", name: "± std", hoverinfo: "skip" });
      }
    }
    chart.traces = traces;
    chart.emaLast = {};
    keys.forEach(function (key) {
      const smoothed = ema((state.series[key] || { y: [] }).y, state.alpha);
      chart.emaLast[key] = smoothed.length ? smoothed[smoothed.length - 1] : null;
    });
    const hasData = spec.stack ? data.length > 0 :
      keys.some(function (k) { return state.series[k] && state.series[k].x.length; });
    chart.div.hidden = !(hasData || spec.always);
    if (chart.div.hidden) return;
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
      title: { text: plotText(spec.title), font: { size: 13 }, yref: "container", y: 1, yanchor: "top", pad: { t: 8 } },
      margin: { l: 50, r: 14, t: 34 + 20 * rows, b: spec.small ? 34 : 40 },
      xaxis: xaxis, hovermode: "x unified", showlegend: showlegend,
      yaxis: yaxis,
      legend: { orientation: "h", x: 0, y: 1, xanchor: "left", yanchor: "bottom", font: { size: 11 } },
      uirevision: state.xAxis + state.logScale,
    };
    if (spec.stack) { layout.barmode = "stack"; layout.bargap = 0.15; }
    Plotly.react(chart.div, data, chartTheme.themed(layout), PLOT_CONFIG);
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
      const spec = chart.spec;
      const structureChanged = spec.stack || !chart.drawn || chart.div.hidden ||
        chartKeys(chart).some(function (k) { return !chart.traces.some(function (t) { return t.key === k; }); }) ||
        (spec.band && points[spec.band] && !chart.traces.some(function (t) { return t.kind === "upper"; })) ||
        axisStale(chart);
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
          ys = added.map(function (p) { last = live.emaStep(last, p[1], state.alpha); return last; });
          chart.emaLast[trace.key] = last;
        } else {
          const mean = state.series[spec.keys[0]];
          const sign = trace.kind === "upper" ? 1 : -1;
          ys = added.map(function (p) { const m = interpolate(mean, p[0]); return m === null ? null : m + sign * p[1]; });
        }
        update.x.push(added.map(function (p) { return p[0]; }));
        update.y.push(ys);
        indices.push(index);
      });
      if (indices.length) Plotly.extendTraces(chart.div, update, indices);
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
          if (key.indexOf(EVAL_PREFIX) === 0) evalChart(key);
        });
        // The first load fixes where the socket starts; later reloads (another x-axis) must not move it,
        // or log lines still in flight on the socket would be skipped after a reconnect.
        if (!connection) state.lastSeq = Math.max(state.lastSeq, body.last_seq);
        ui.note.textContent = downsampled ? "long curves are shown downsampled (each bucket's min and max)" : "";
        state.loading = false;
        if (state.xAxis === "step") {
          let lastStep = null;
          EVAL_FIRST.forEach(function (key) {
            const c = state.series[key];
            if (c && c.x.length && (lastStep === null || c.x[c.x.length - 1] > lastStep)) lastStep = c.x[c.x.length - 1];
          });
          const values = {};
          EVAL_FIRST.forEach(function (key) {
            const c = state.series[key];
            if (c && c.x.length && c.x[c.x.length - 1] === lastStep) values[key] = c.y[c.y.length - 1];
          });
          if (lastStep !== null) noteEvaluation(lastStep, values);
        }
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

  // --- per-step histograms, click to filter ------------------------------------------------------------

  const histogram = { body: null, timer: null, bound: false };

  function histogramLabel(field) { return field === "length" ? "response length" : "reward"; }

  function loadHistogram() {
    const field = ui.histogramField.value, split = ui.histogramSplit.value;
    const url = root.dataset.histogramsUrl + "?field=" + field + "&split=" + split + "&bins=20";
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (!body || field !== ui.histogramField.value || split !== ui.histogramSplit.value) return;
        histogram.body = body;
        drawHistogram();
      })
      .catch(function () { /* the next trajectories event tries again */ });
  }

  function scheduleHistogram() {
    if (histogram.timer !== null) return;
    histogram.timer = window.setTimeout(function () { histogram.timer = null; loadHistogram(); }, HISTOGRAM_DELAY_MS);
  }

  function drawHistogram() {
    const body = histogram.body;
    const div = ui.histogram;
    if (!body.steps.length) {
      div.hidden = true;
      ui.histogramNote.textContent = "no " + (body.split === "eval" ? "evaluation" : "training") + " trajectories yet";
      return;
    }
    div.hidden = false;
    ui.histogramNote.textContent = "click a cell to list its trajectories in the feed" +
      (body.stride > 1 ? " · each column is " + body.stride + " steps" : "");
    const edges = body.edges;
    const centres = edges.slice(0, -1).map(function (e, i) { return (e + edges[i + 1]) / 2; });
    const z = centres.map(function (_, b) { return body.counts.map(function (column) { return column[b] || 0; }); });
    const label = histogramLabel(body.field);
    const trace = {
      type: "heatmap", x: body.steps, y: centres, z: z, colorscale: chartTheme.heatScale(), xgap: 1, ygap: 1,
      zmin: 0, colorbar: { title: { text: "trajectories" }, thickness: 12 },
      hovertemplate: "step %{x}<br>" + label + " ≈ %{y:.3g}<br>%{z} trajectories<extra></extra>",
    };
    const xaxis = chartTheme.stepAxis(body.steps[0], body.steps[body.steps.length - 1]);
    delete xaxis.range;  // a heatmap's cells already span their steps
    Plotly.react(div, [trace], chartTheme.themed({
      title: { text: plotText(label[0].toUpperCase() + label.slice(1) + " per step (" +
        (body.split === "eval" ? "evaluation" : "training") + ")"), font: { size: 13 } },
      margin: { l: 56, r: 14, t: 36, b: 40 }, xaxis: xaxis, yaxis: { title: { text: plotText(label) } },
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

  function rounded(value) { return String(Number(value.toPrecision(6))); }

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
    fetch(root.dataset.binUrl + query, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : { trajectories: [] }; })
      .then(function (answer) { if (state.binFilter === filter) showFiltered(filter, answer.trajectories); })
      .catch(function () { /* keep the feed as it was */ });
  }

  function showFiltered(filter, rows) {
    const steps = filter.stepMin === filter.stepMax ? "step " + filter.stepMin : "steps " + filter.stepMin + "–" + filter.stepMax;
    const range = filter.field === "length"
      ? "response length " + Math.round(filter.low) + "–" + (Math.round(filter.high) - (filter.last ? 0 : 1)) + " tokens"
      : "reward " + rounded(filter.low) + " to " + rounded(filter.high);
    ui.feedFilterText.textContent = (filter.split === "eval" ? "Evaluation, " : "Training, ") + steps + ", " + range +
      ": " + rows.length + (rows.length === 50 ? "+" : "") + " trajectories";
    let explorer = root.dataset.explorerUrl + "?run=" + encodeURIComponent(root.dataset.run) + "&split=" + filter.split +
      "&step_min=" + filter.stepMin + "&step_max=" + filter.stepMax;
    if (filter.field === "reward") explorer += "&reward_min=" + rounded(filter.low) + "&reward_max=" + rounded(filter.high);
    else explorer += "&length_min=" + Math.round(filter.low) + "&length_max=" + (Math.round(filter.high) - (filter.last ? 0 : 1));
    ui.feedFilterExplorer.href = explorer;
    ui.feedFiltered.textContent = "";
    rows.forEach(function (row) {
      const item = document.createElement("li");
      item.dataset.trajectory = String(row.id);
      const link = document.createElement("a");
      link.href = root.dataset.trajectoryBase + encodeURIComponent(String(row.id)) + "/";
      link.textContent = "#" + row.id;
      item.appendChild(link);
      item.appendChild(text("span", " step " + row.step + " · group " + row.group + " sample " + row.sample + " · "));
      taskNodes(row).forEach(function (node) { item.appendChild(node); });
      item.appendChild(text("span", " · reward " + fmt(row.reward) + " · " + row.completion_tokens + " tokens" +
        (row.status !== "ok" ? " · " + row.status : "")));
      ui.feedFiltered.appendChild(item);
    });
    if (!rows.length) ui.feedFiltered.appendChild(text("li", "No trajectories in this cell any more.", "muted"));
    showFeed();
  }

  ui.feedFilterClear.addEventListener("click", function () { state.binFilter = null; showFeed(); });
  ui.histogramField.addEventListener("change", loadHistogram);
  ui.histogramSplit.addEventListener("change", loadHistogram);

  // --- progress, log, feed -----------------------------------------------------------------------------

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

  function addLogLine(line, level) {
    const box = ui.log;
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 20;
    box.appendChild(text("div", line, "level-" + (level || "info")));
    state.logLines += 1;
    while (state.logLines > LOG_LINES) { box.removeChild(box.firstChild); state.logLines -= 1; }
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  function logEvent(event) {
    if (event.type === "log") {
      addLogLine(clock(event.time) + "[" + (event.level || "info") + "] " + event.message, event.level);
    } else if (event.type === "checkpoint") {
      addLogLine(clock(event.time) + "[checkpoint] step " + event.step + " saved" + (event.metrics_text ? " (" + event.metrics_text + ")" : ""));
    } else if (event.type === "status") {
      addLogLine(clock(event.time) + "[status] " + event.status + (event.message ? ": " + event.message : ""),
        event.status === "FAILED" || event.status === "LOST" ? "error" : "info");
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

  // A task as every page shows it (templates/rollouts/_task.html): its prompt's first line, the whole
  // prompt on hover, and the expected answer; its id where the trainer sent no prompt.
  function taskNodes(source) {
    const nodes = [];
    const headline = source.task || source.task_id;
    const name = text(source.task && source.task !== source.task_id ? "span" : "code", headline, "task-text");
    name.title = source.task_hover || ("task " + source.task_id);
    name.dataset.task = "";
    nodes.push(name);
    if (source.answer) {
      const answer = text("span", " expected ", "task-answer muted small");
      answer.appendChild(text("strong", source.answer.length > 80 ? source.answer.slice(0, 79) + "…" : source.answer));
      answer.dataset.taskAnswer = "";
      nodes.push(answer);
    }
    return nodes;
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
    if (parts.length) detail.appendChild(text("span", " · weighted: " + parts.join(" · "), "muted small"));
    box.appendChild(detail);
    if (sample.hacking) box.appendChild(text("div", sample.hacking, "badge hacking"));
    box.appendChild(text("pre", sample.final || "(no final answer)"));
    return box;
  }

  function groupNode(step, group) {
    const item = document.createElement("li");
    const head = document.createElement("div");
    head.className = "head";
    head.appendChild(text("span", "step " + step + " · " + group.split + " group " + group.group + " · "));
    taskNodes(group).forEach(function (node) { head.appendChild(node); });
    head.appendChild(text("span", " · mean " + fmt(group.mean) + " ± " + fmt(group.std) + " · " + group.size + " samples "));
    if (group.zero_variance) {
      const flag = text("span", "zero variance: no learning signal", "badge zero");
      flag.title = "Every sample got the same reward, so every advantage is 0.";
      head.appendChild(flag);
    }
    if (group.hacking) {
      const alarm = text("span", "possible reward hacking (" + group.hacking.count + ")", "badge hacking");
      alarm.title = group.hacking.message;
      head.appendChild(alarm);
    }
    item.appendChild(head);
    if (group.best) item.appendChild(sampleNode(group.best, "best", "best"));
    if (group.worst && (!group.best || group.worst.id !== group.best.id)) {
      item.appendChild(sampleNode(group.worst, "worst", "worst"));
    }
    return item;
  }

  // Training groups and evaluation groups are listed apart: an evaluation's many groups never push the
  // training rollouts out of view.
  function showGroups(entries) {
    entries.forEach(function (entry) {
      const isEval = entry.group.split === "eval";
      const list = isEval ? ui.feedEval : ui.feed;
      const emptyKey = isEval ? "feedEvalEmpty" : "feedEmpty";
      if (ui[emptyKey]) { ui[emptyKey].remove(); ui[emptyKey] = null; }
      list.insertBefore(groupNode(entry.step, entry.group), list.firstChild);
      while (list.children.length > FEED_GROUPS) list.removeChild(list.lastChild);
    });
  }

  function feedEvent(event) {
    const entries = (event.groups || []).map(function (group) { return { step: event.step, group: group }; });
    if (state.paused) {
      state.pausedGroups = state.pausedGroups.concat(entries).slice(-2 * FEED_GROUPS);
      ui.pausedCount.textContent = "(" + state.pausedGroups.length + " new)";
      return;
    }
    showGroups(entries);
  }

  function showFeed() {
    const filtered = state.binFilter !== null;
    ui.feedFilter.hidden = !filtered;
    ui.feedFiltered.hidden = !filtered;
    ui.feed.hidden = filtered || state.feedTab !== "train";
    ui.feedEval.hidden = filtered || state.feedTab !== "eval";
    root.querySelectorAll("[data-live-feed-tab]").forEach(function (tab) {
      tab.setAttribute("aria-pressed", String(!filtered && tab.dataset.liveFeedTab === state.feedTab));
    });
  }

  root.querySelectorAll("[data-live-feed-tab]").forEach(function (tab) {
    tab.addEventListener("click", function () {
      state.feedTab = tab.dataset.liveFeedTab;
      state.binFilter = null;
      showFeed();
    });
  });

  ui.pause.addEventListener("change", function () {
    state.paused = ui.pause.checked;
    if (!state.paused) {
      showGroups(state.pausedGroups);
      state.pausedGroups = [];
      ui.pausedCount.textContent = "";
    }
  });

  // --- the newest evaluation's figures, as numbers in the live bar ---------------------------------------

  function noteEvaluation(step, values) {
    if (typeof step !== "number") return;
    const latest = state.latestEval;
    if (latest && step < latest.step) return;
    const merged = latest && latest.step === step ? latest.values : {};
    Object.keys(values).forEach(function (key) {
      if (key.indexOf(EVAL_PREFIX) === 0 && typeof values[key] === "number") merged[key] = values[key];
    });
    if (!Object.keys(merged).length) return;
    state.latestEval = { step: step, values: merged };
    showEvaluation();
  }

  // "accuracy 0.250 · reward/mean 0.300": accuracy first, then the mean reward (what EVAL_FIRST names).
  function showEvaluation() {
    const latest = state.latestEval;
    if (!latest || !ui.evalLatest) return;
    ui.evalLatest.hidden = false;
    ui.evalLatestStep.textContent = String(latest.step);
    ui.evalLatestFigures.textContent = "";
    EVAL_FIRST.filter(function (key) { return key in latest.values; }).forEach(function (key, index) {
      if (index) ui.evalLatestFigures.appendChild(document.createTextNode(" · "));
      const figure = text("span", key.slice(EVAL_PREFIX.length) + " ");
      figure.dataset.evalFigure = key;
      figure.appendChild(text("strong", latest.values[key].toFixed(3)));
      ui.evalLatestFigures.appendChild(figure);
    });
  }

  // --- events ------------------------------------------------------------------------------------------

  function applyEvent(event) {
    if (typeof event.seq === "number" && event.seq > state.lastSeq) state.lastSeq = event.seq;
    switch (event.type) {
      case "metrics":
        applyMetrics(event);
        setProgress(event.step);
        if (event.values) noteEvaluation(event.step, event.values);
        if (event.values) setBest(event.values["reward/mean"]);
        break;
      case "trajectories":
        feedEvent(event);
        scheduleHistogram();
        break;
      case "phase":
        setPhase(event);
        break;
      case "status":
        applyPageState(event);
        if (event.seq !== undefined) logEvent(event);
        break;
      case "cancel_requested":
        setCancelRequested(true);
        if (event.actions) setActions(event.actions);
        break;
      case "hacking_alarm":
        setHackingAlarm(event.alarm);
        break;
      case "queue":
        setQueue(event.queue);
        break;
      case "peak_memory":
        setPeakMemory(event.peak_memory);
        break;
      case "heartbeat":
        setTimes(event);  // the server's seq-less heartbeat_at; the trainer's own heartbeats carry none
        if ("stall" in event) setStall(event.stall);
        break;
      case "checkpoint":
        addCheckpoint(event);
        logEvent(event);
        break;
      case "log":
        logEvent(event);
        break;
    }
  }

  function applySnapshot(message) {
    const run = message.run;
    applyPageState(run);
    state.maxSteps = run.max_steps || state.maxSteps;
    setProgress(run.current_step);
    setBest(run.best_reward);
    if (run.phase) setPhase(run.phase);
    if ("hacking_alarm" in run) setHackingAlarm(run.hacking_alarm);
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

  let connection = null;  // the socket follower, once started

  function connect() {
    connection = live.followRun({
      path: root.dataset.wsPath,
      lastSeq: function () { return state.lastSeq; },
      onEvent: applyEvent,
      onSnapshot: applySnapshot,
      isFinal: isFinal,
      onState: setConnection,
    });
  }

  // --- controls ---------------------------------------------------------------------------------------

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

  // The cancel button asks first (a <dialog>; without script the form posts as it is).
  const dialog = document.querySelector("[data-cancel-dialog]");
  let cancelForm = null;
  document.querySelectorAll("[data-confirm-cancel]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!dialog || typeof dialog.showModal !== "function") return;
      event.preventDefault();
      cancelForm = form;
      dialog.showModal();
    });
  });
  if (dialog) {
    dialog.querySelector("[data-cancel-dialog-keep]").addEventListener("click", function () { dialog.close(); });
    dialog.querySelector("[data-cancel-dialog-confirm]").addEventListener("click", function () {
      dialog.close();
      if (!cancelForm) return;
      // The request shows at once: the badge, and the button stops offering itself while the post goes.
      setCancelRequested(true);
      cancelForm.querySelectorAll("button").forEach(function (button) {
        button.disabled = true;
        button.textContent = "Cancelling…";
      });
      cancelForm.submit();  // submit() skips the submit handler: no second question
    });
  }

  function loadRecent(type, limit) {
    const url = root.dataset.eventsUrl + "?type=" + type + "&limit=" + limit + "&until_seq=" + state.lastSeq;
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : { events: [] }; })
      .then(function (body) { return body.events; })
      .catch(function () { return []; });
  }

  // Start: the state the page was rendered with (the same snapshot the socket sends), then curves (which
  // also fix the seq we resume from), the recent log lines and rollout groups up to that seq, then the
  // socket for everything after it.
  const rendered = document.getElementById("run-snapshot");
  if (rendered) applySnapshot({ run: JSON.parse(rendered.textContent) });
  setProgress(state.currentStep);
  showFeed();
  loadHistogram();
  loadCurves().then(function () {
    // A training step sends one trajectories event per group: FEED_GROUPS events fill the feed.
    return Promise.all([loadRecent("log", LOG_LINES), loadRecent("trajectories", FEED_GROUPS)]);
  }).then(function (recent) {
    recent[0].forEach(logEvent);
    recent[1].forEach(feedEvent);
    connect();
  });
})();
