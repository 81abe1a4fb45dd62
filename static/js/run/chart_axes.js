// Pure helpers of the run page's curves: the x-axis of a chart, the ± std band around the mean, and how
// much room a legend takes.
import { chartTheme, state } from "./state.js";

// Linear interpolation of a sorted series at x (the std band's own x positions need the mean there).
export function interpolate(series, x) {
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

export function bandPoints(meanSeries, stdSeries) {
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
export function xAxisLayout(keys) {
  if (state.xAxis === "time") return { type: "date", title: { text: "time" } };
  if (state.xAxis === "tokens") return { title: { text: "tokens seen" }, tickformat: "~s" };
  const bounds = chartTheme.span(keys.map(function (key) { return state.series[key]; }));
  return chartTheme.stepAxis(bounds[0], bounds[1]);
}

// How many rows a horizontal legend of these names takes in `width` pixels (about 6.5 px a
// character at 11 px plus the sample line), so the top margin can make room for them.
export function legendRows(names, width) {
  let rows = 1, used = 0;
  names.forEach(function (name) {
    const entry = 40 + 6.5 * String(name || "").length;
    if (used > 0 && used + entry > width) { rows += 1; used = 0; }
    used += entry;
  });
  return rows;
}
