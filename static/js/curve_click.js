// From curve to cause, for every step curve of the run page: a click on a point of a chart whose x-axis is
// the step opens that step's groups, each with its best and worst sample (…/groups/?step=N; on an
// evaluation curve, &split=eval). One module, called by whoever draws a step chart: the live charts
// (static/js/run_live.js, while their x-axis is the step) and the async-health panel (static/js/async_health.js).
//
//   RolloutStepClick.bind(div, { url: groupsUrl, split: "eval" | "", enabled: function () { return true; } })
//
// Binds once per chart div (Plotly keeps the handler across Plotly.react); the options of the first call hold.
(function () {
  "use strict";

  function bind(div, options) {
    if (!div || !options || !options.url || div.dataset.stepClick || typeof div.on !== "function") return;
    div.dataset.stepClick = "1";
    div.style.cursor = "pointer";
    div.on("plotly_click", function (event) {
      const point = event && event.points && event.points[0];
      if (!point || (options.enabled && !options.enabled())) return;
      const step = Math.round(Number(point.x));
      if (!isFinite(step)) return;
      const split = options.split ? "&split=" + encodeURIComponent(options.split) : "";
      window.location.assign(options.url + "?step=" + step + split);
    });
  }

  window.RolloutStepClick = { bind: bind };
})();
