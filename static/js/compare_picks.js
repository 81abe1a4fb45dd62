// Ticking items to compare them (the runs list, the trajectory explorer): a form with [data-compare-button]
// and [data-compare-count], and ticked boxes [data-compare-pick] anywhere on the page. The button takes
// data-min-compared (2) to data-max-compared ticked; the count says how many, in data-compare-noun's words
// ("3 runs ticked."), and with none ticked the hint the server wrote. Without this script the form still
// submits the ticked boxes.
(function () {
  "use strict";
  function update(form) {
    const min = Number(form.dataset.minCompared) || 2;
    const max = Number(form.dataset.maxCompared) || 8;
    const noun = form.dataset.compareNoun || "";
    const count = form.querySelector("[data-compare-count]");
    if (count.dataset.hint === undefined) count.dataset.hint = count.textContent;
    const chosen = document.querySelectorAll("[data-compare-pick]:checked").length;
    form.querySelector("[data-compare-button]").disabled = chosen < min || chosen > max;
    const ticked = chosen + (noun ? " " + noun + (chosen === 1 ? "" : "s") : "") + " ticked";
    count.textContent = chosen === 0 ? count.dataset.hint
      : chosen > max ? ticked + ": compare at most " + max + "."
      : ticked + (chosen < min ? ": tick one more." : ".");
  }
  window.RolloutComparePicks = { update: update };
})();
