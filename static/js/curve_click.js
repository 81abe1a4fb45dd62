// From curve to cause, for every step curve: a click on a point of a chart whose x-axis is the step opens
// that step's groups, each with its best and worst sample (…/groups/?step=N; on an evaluation curve,
// &split=eval). One module, called by whoever draws a step chart: the run page's live charts
// (static/js/run_live.js, while their x-axis is the step), its async-health panel (static/js/run/async_health.js)
// and the compare page (static/js/compare.js), whose curves are each another run's.
//
//   RolloutStepClick.bind(div, { url: groupsUrl, split: "eval" | "", enabled: function () { return true; } })
//
// `url` and `split` may be functions of the clicked point (the compare page: the groups of that point's
// run, eval when the metric is); a url of null makes the click do nothing (a DPO run has no groups).
// Binds once per chart div (Plotly keeps the handler across Plotly.react); the options of the first call hold.
(function () {
  "use strict";

  // The point the user clicked: under "x unified" hover Plotly hands over every trace's point at that x,
  // so take the one drawn nearest the cursor (one trace, or a click without a mouse event: the first).
  function clicked(div, event) {
    const points = (event && event.points) || [];
    const mouse = event && event.event;
    if (points.length < 2 || !mouse || typeof mouse.clientY !== "number") return points[0];
    const top = div.getBoundingClientRect().top;
    let best = points[0], distance = Infinity;
    points.forEach(function (point) {
      const axis = point.yaxis;
      if (!axis || typeof axis.l2p !== "function" || typeof point.y !== "number") return;
      const d = Math.abs(top + axis._offset + axis.l2p(point.y) - mouse.clientY);
      if (d < distance) { best = point; distance = d; }
    });
    return best;
  }

  function option(value, point) { return typeof value === "function" ? value(point) : value; }

  function bind(div, options) {
    if (!div || !options || !options.url || div.dataset.stepClick || typeof div.on !== "function") return;
    div.dataset.stepClick = "1";
    div.style.cursor = "pointer";
    div.on("plotly_click", function (event) {
      const point = clicked(div, event);
      if (!point || (options.enabled && !options.enabled())) return;
      const step = Math.round(Number(point.x));
      const url = option(options.url, point);
      if (!isFinite(step) || !url) return;
      const split = option(options.split, point);
      window.location.assign(url + "?step=" + step + (split ? "&split=" + encodeURIComponent(split) : ""));
    });
  }

  window.RolloutStepClick = { bind: bind };
})();
