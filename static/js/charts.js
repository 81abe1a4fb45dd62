// Shared by every page that draws Plotly charts (the run page, compare): the charts' colours. They are
// read from the stylesheet's palette (the custom properties of static/css/app.css: --panel, --ink,
// --muted, --line, --grid, --accent), so CSS stays the one home of light and dark, and a chart sits on
// its card like the rest of the page. Every layout goes through RolloutCharts.themed(layout) before
// Plotly.react; charts already drawn are re-themed in place (Plotly.relayout / restyle) on site.js's
// "themechange" event, which fires for the toggle, Shift+D and a change of the system's preference.
(function () {
  "use strict";
  if (!window.Plotly) return;

  function palette() {
    const style = window.getComputedStyle(document.documentElement);
    const read = function (name) { return style.getPropertyValue(name).trim(); };
    return { panel: read("--panel"), ink: read("--ink"), muted: read("--muted"), line: read("--line"),
      grid: read("--grid"), accent: read("--accent") };
  }

  // The axes a layout names (xaxis, yaxis, xaxis2, …); x and y always, as Plotly draws them anyway.
  function axisNames(layout) {
    const names = ["xaxis", "yaxis"];
    Object.keys(layout || {}).forEach(function (key) {
      if (/^[xy]axis\d+$/.test(key)) names.push(key);
    });
    return names;
  }

  // The one rule: which layout attribute takes which colour of the palette, as Plotly attribute paths
  // (what Plotly.relayout takes). Titles, legends, tick labels and colour bars inherit font.color; the
  // legend's background follows paper_bgcolor.
  function layoutColours(layout) {
    const c = palette();
    const update = {
      paper_bgcolor: c.panel, plot_bgcolor: c.panel, "font.color": c.ink,
      "hoverlabel.bgcolor": c.panel, "hoverlabel.bordercolor": c.line, "hoverlabel.font.color": c.ink,
      "modebar.bgcolor": "rgba(0, 0, 0, 0)", "modebar.color": c.muted, "modebar.activecolor": c.ink,
    };
    axisNames(layout).forEach(function (axis) {
      update[axis + ".gridcolor"] = c.grid;
      update[axis + ".zerolinecolor"] = c.muted;
      update[axis + ".linecolor"] = c.line;
    });
    return update;
  }

  // A heatmap's colours: an empty cell is the card, the fullest is the accent.
  function heatScale() {
    const c = palette();
    return [[0, c.panel], [1, c.accent]];
  }

  function setPath(target, path, value) {
    const parts = path.split(".");
    let node = target;
    for (let i = 0; i < parts.length - 1; i++) {
      if (typeof node[parts[i]] !== "object" || node[parts[i]] === null) node[parts[i]] = {};
      node = node[parts[i]];
    }
    node[parts[parts.length - 1]] = value;
  }

  // `layout` with the current theme's colours filled in (it is changed and returned).
  function themed(layout) {
    const colours = layoutColours(layout);
    Object.keys(colours).forEach(function (path) { setPath(layout, path, colours[path]); });
    return layout;
  }

  // Re-theme every chart on the page that Plotly has drawn.
  function rethemeAll() {
    document.querySelectorAll(".js-plotly-plot").forEach(function (div) {
      if (!div._fullLayout) return;
      Plotly.relayout(div, layoutColours(div.layout));
      const heatmaps = [];
      (div.data || []).forEach(function (trace, index) { if (trace.type === "heatmap") heatmaps.push(index); });
      if (heatmaps.length) Plotly.restyle(div, { colorscale: [heatScale()] }, heatmaps);
    });
  }
  document.addEventListener("themechange", rethemeAll);

  // --- what every chart of steps draws: the one rule for step axes, markers and bounded ranges ---------

  // A step axis over [lo, hi]: whole-step ticks only, never two alike (Plotly's own choice may put
  // ticks at half steps, which tickformat "d" then prints twice), at most about `most` of them. A
  // single step gets a range of its own around it (Plotly's default would reach to step −1).
  function stepAxis(lo, hi, most) {
    const axis = { title: { text: "step" }, tickformat: "d", tick0: 0 };
    if (!(hi >= lo)) { axis.dtick = 1; return axis; }
    const span = hi - lo;
    const target = Math.max(1, span / (most || 8));
    const magnitude = Math.pow(10, Math.floor(Math.log10(target)));
    const nice = [1, 2, 5, 10].map(function (m) { return m * magnitude; }).find(function (d) { return d >= target; });
    axis.dtick = Math.max(1, Math.round(nice));
    if (span < 1) axis.range = [lo - 0.5, hi + 0.5];
    return axis;
  }

  // The x span of some {x: [...]} series (sorted): [lo, hi], or [NaN, NaN] when they are all empty.
  function span(seriesList) {
    let lo = Infinity, hi = -Infinity;
    seriesList.forEach(function (s) {
      if (s && s.x && s.x.length) { lo = Math.min(lo, s.x[0]); hi = Math.max(hi, s.x[s.x.length - 1]); }
    });
    return hi >= lo ? [lo, hi] : [NaN, NaN];
  }

  // Short series are drawn with markers: a series of one point is a dot, not nothing.
  const MARKERS_BELOW = 30;
  function lineMode(points) { return points < MARKERS_BELOW ? "lines+markers" : "lines"; }

  // Metrics that are fractions (accuracy, a fraction of groups): a fixed 0–1 range, so a flat 0 reads
  // as 0 and not as ticks around it.
  function isFraction(key) { return /(^|\/)accuracy$|_fraction$|(^|\/)pass@\d+$/.test(String(key)); }
  function fractionRange() { return [-0.03, 1.03]; }

  // --- series that coincide, charts with nothing to draw ----------------------------------------------

  // Two series coincide when they have the same points (staleness/mean under staleness/max when every
  // sample is as stale, correct under correct/weighted at weight 1): drawn alike, the later one would hide
  // the earlier. For each key of `keys`, the earlier key it coincides with, if any.
  function sameAs(seriesByKey, keys) {
    const found = {};
    keys.forEach(function (key, i) {
      const s = seriesByKey[key];
      if (!s || !s.x.length) return;
      for (let j = 0; j < i; j++) {
        const other = seriesByKey[keys[j]];
        if (found[keys[j]] === undefined && other && coincide(s, other)) { found[key] = keys[j]; return; }
      }
    });
    return found;
  }

  function coincide(a, b) {
    if (a.x.length !== b.x.length) return false;
    for (let i = 0; i < a.x.length; i++) {
      if (a.x[i] !== b.x[i]) return false;
      const scale = Math.max(1, Math.abs(a.y[i]), Math.abs(b.y[i]));
      if (Math.abs(a.y[i] - b.y[i]) > 1e-9 * scale) return false;
    }
    return true;
  }

  // How the n-th series of a chart is drawn: the first solid, the others dashed or dotted with open
  // markers, so that a series lying on another still shows as its own line.
  const DASHES = ["solid", "dash", "dot", "dashdot", "longdash"];
  const SYMBOLS = ["circle", "diamond-open", "square-open", "triangle-up-open", "x"];
  function seriesStyle(index) {
    return { dash: DASHES[index % DASHES.length], symbol: SYMBOLS[index % SYMBOLS.length] };
  }

  // A chart with no points yet says so instead of inventing axes (Plotly's empty default runs x −1…6).
  const NO_POINTS = "no points yet";
  function noPoints(layout) {
    layout.xaxis = Object.assign({}, layout.xaxis, { visible: false });
    layout.yaxis = Object.assign({}, layout.yaxis, { visible: false });
    layout.showlegend = false;
    layout.annotations = [{ text: NO_POINTS, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5,
      font: { size: 13 }, name: "no-points" }];
    return layout;
  }

  window.RolloutCharts = {
    themed: themed, heatScale: heatScale, stepAxis: stepAxis, span: span, lineMode: lineMode,
    isFraction: isFraction, fractionRange: fractionRange, sameAs: sameAs, seriesStyle: seriesStyle,
    noPoints: noPoints, NO_POINTS: NO_POINTS,
  };
})();
