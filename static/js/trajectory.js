// Trajectory page: the first turns arrive with the page; htmx fetches the next window whenever its
// "Loading turns…" row scrolls into view (hx-trigger="revealed"). This file adds what scrolling cannot:
// "Load all turns" (for the browser's find-in-page) and links to a turn that is not loaded yet
// (#turn-250): both fire the `load-now` trigger on the pending row until nothing (or the turn) is left.
// No data from the trajectory is written to the DOM here; htmx swaps in server-escaped HTML.
(function () {
  "use strict";
  const list = document.querySelector("[data-turns]");
  if (!list) return;
  const loadAllButton = document.querySelector("[data-load-all-turns]");
  let goal = null; // "all", or the id of the turn element we are loading towards

  function pending() { return list.querySelector("[data-turns-more]"); }

  function reached() {
    if (goal === "all") return !pending();
    return goal === null || document.getElementById(goal) !== null || !pending();
  }

  function step() {
    if (reached()) {
      if (goal && goal !== "all") {
        const target = document.getElementById(goal);
        if (target) target.scrollIntoView({ block: "start" });
      }
      if (goal === "all" && loadAllButton) loadAllButton.hidden = true;
      goal = null;
      return;
    }
    const row = pending();
    if (row && !row.dataset.requested && window.htmx) {
      row.dataset.requested = "1";
      window.htmx.trigger(row, "load-now");
    }
  }

  // Fold / unfold every system prompt and tool output (a long trace starts folded); turns loaded later
  // follow the choice.
  const foldToggle = document.querySelector("[data-fold-toggle]");
  function folded() { return foldToggle && foldToggle.getAttribute("aria-pressed") === "true"; }
  function applyFold() {
    list.querySelectorAll("details.fold").forEach(function (node) { node.open = !folded(); });
  }
  if (foldToggle) {
    foldToggle.addEventListener("click", function () {
      const next = !folded();
      foldToggle.setAttribute("aria-pressed", String(next));
      foldToggle.textContent = (next ? "Unfold" : "Fold") + " system prompts and tool output";
      applyFold();
    });
  }

  // Each swapped-in window ends with a fresh pending row: continue from there.
  document.body.addEventListener("htmx:afterSettle", function () {
    applyFold();
    window.trajectoryTurnsLoaded = list.querySelectorAll("li.turn").length;
    if (goal !== null) step();
    if (!pending() && loadAllButton) loadAllButton.hidden = true;
  });
  // A request that fails leaves its row in place; let the reader (or a later scroll) retry.
  document.body.addEventListener("htmx:responseError", function (event) {
    const row = event.detail.elt;
    if (row && row.dataset) delete row.dataset.requested;
    if (row && row.matches && row.matches("[data-turns-more]")) row.textContent = "Could not load more turns; scroll again to retry.";
    goal = null;
  });

  if (loadAllButton) {
    loadAllButton.addEventListener("click", function () {
      loadAllButton.disabled = true;
      goal = "all";
      step();
    });
  }

  function followHash() {
    const match = /^#(turn-\d+)$/.exec(window.location.hash);
    if (!match || document.getElementById(match[1])) return;
    goal = match[1];
    step();
  }
  window.addEventListener("hashchange", followHash);
  window.trajectoryTurnsLoaded = list.querySelectorAll("li.turn").length;
  // htmx (loaded before this file) processes the page on DOMContentLoaded; trigger nothing before that.
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", followHash);
  else window.setTimeout(followHash, 0);
})();
