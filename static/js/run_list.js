// Runs list: ticking runs enables "Compare selected" (2 to the compare page's limit), and the sort select
// applies at once. Without this script the form still submits the ticked runs and the Search button sorts.
(function () {
  "use strict";
  const form = document.getElementById("compare-form");
  if (form) {
    const max = Number(form.dataset.maxCompared) || 8;
    const button = form.querySelector("[data-compare-button]");
    const count = form.querySelector("[data-compare-count]");
    const picks = function () { return Array.from(document.querySelectorAll("[data-compare-pick]")); };
    const update = function () {
      const chosen = picks().filter(function (p) { return p.checked; }).length;
      button.disabled = chosen < 2 || chosen > max;
      count.textContent = chosen === 0 ? "Tick 2 to " + max + " runs to compare them."
        : chosen > max ? chosen + " runs ticked: compare at most " + max + "."
        : chosen + " run" + (chosen === 1 ? "" : "s") + " ticked" + (chosen < 2 ? ": tick one more." : ".");
    };
    document.addEventListener("change", function (event) {
      if (event.target.matches("[data-compare-pick]")) update();
    });
    update();
  }
  const sort = document.querySelector("select[data-autosubmit]");
  if (sort) sort.addEventListener("change", function () { sort.form.submit(); });
})();
