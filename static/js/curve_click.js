// Run page: from curve to cause. A click on a point of any step curve of the live charts (static/js/run_live.js
// draws them) opens that step's groups, each with its best and worst sample; on an evaluation curve, the
// step's evaluation groups. Only while the x-axis is the step. Charts appear as metrics arrive, so the
// plotted ones are looked for once a second and each gets one click handler.
(function () {
  "use strict";
  const live = document.getElementById("run-live");
  const health = document.querySelector("[data-async-health]");
  if (!live || !health) return;
  const xAxis = live.querySelector("[data-live-x]");
  const groupsUrl = health.dataset.groupsUrl;

  function bind() {
    live.querySelectorAll(".live-chart").forEach(function (div) {
      if (div.dataset.stepClick || typeof div.on !== "function") return;
      div.dataset.stepClick = "1";
      div.style.cursor = "pointer";
      div.on("plotly_click", function (event) {
        const point = event.points && event.points[0];
        if (!point || (xAxis && xAxis.value !== "step")) return;
        const step = Math.round(Number(point.x));
        if (!isFinite(step)) return;
        const split = div.closest("[data-live-eval]") ? "&split=eval" : "";
        window.location.assign(groupsUrl + "?step=" + step + split);
      });
    });
  }
  bind();
  window.setInterval(bind, 1000);
})();
