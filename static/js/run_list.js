// Runs list: ticking runs enables "Compare selected" (2 to the compare page's limit), and the sort select
// applies at once. Without this script the form still submits the ticked runs and the Search button sorts.
(function () {
  "use strict";
  const form = document.getElementById("compare-form");
  if (form) {
    const update = function () { window.RolloutComparePicks.update(form); };  // static/js/compare_picks.js
    document.addEventListener("change", function (event) {
      if (event.target.matches("[data-compare-pick]")) update();
    });
    update();
  }
  const sort = document.querySelector("select[data-autosubmit]");
  if (sort) sort.addEventListener("change", function () { sort.form.submit(); });
})();
