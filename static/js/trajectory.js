// Trajectory page: the first turns arrive with the page; htmx fetches the next window whenever its
// "Loading turns…" row scrolls into view (hx-trigger="revealed"). This file adds what scrolling cannot:
// "Load all turns" (for the browser's find-in-page) and links to a turn that is not loaded yet
// (#turn-250): both fire the `load-now` trigger on the pending row until nothing (or the turn) is left.
// Keys: j / k step through the model's turns, w marks the current one as where the trajectory went wrong.
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

  // htmx's `revealed` fires once per row. A row it missed (seen in the suite on a loaded machine: the
  // window before it was swapped in and trimmed while the page moved, and the reader at the bottom waited
  // on "Loading turns…" forever) or whose request failed would never load; so scrolling or turning the
  // wheel also asks for the pending row's window while the row is on screen. htmx drops the ask while a
  // request for that row is in flight.
  let askQueued = false;
  function askForVisibleRow() {
    if (askQueued) return;
    askQueued = true;
    window.setTimeout(function () {
      askQueued = false;
      const row = pending();
      if (!row || !window.htmx) return;
      const box = row.getBoundingClientRect();
      if (box.top < window.innerHeight && box.bottom >= 0) window.htmx.trigger(row, "load-now");
    }, 200);
  }
  window.addEventListener("scroll", askForVisibleRow, { passive: true });
  window.addEventListener("wheel", askForVisibleRow, { passive: true });

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

  // Judging turns from the keyboard: j / k move between the model's turns (focus and #turn-N), w marks
  // the focused turn "went wrong here" (its form's button, so the server does the rest).
  function modelTurns() { return Array.from(list.querySelectorAll("li.turn.role-assistant")); }
  function current() {
    const focused = document.activeElement && document.activeElement.closest && document.activeElement.closest("li.turn");
    if (focused) return focused;
    const match = /^#turn-(\d+)$/.exec(window.location.hash);
    return match ? document.getElementById("turn-" + match[1]) : null;
  }
  function moveTurn(delta) {
    const turns = modelTurns();
    if (!turns.length) return;
    const at = turns.indexOf(current());
    const next = turns[at < 0 ? (delta > 0 ? 0 : turns.length - 1) : Math.min(Math.max(at + delta, 0), turns.length - 1)];
    next.setAttribute("tabindex", "-1");
    next.focus();
    next.scrollIntoView({ block: "start" });
    if (window.history && window.history.replaceState) window.history.replaceState(null, "", "#" + next.id);
  }
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest && event.target.closest("input, textarea, select, [contenteditable=true]")) return;
    if (event.key === "j") moveTurn(1);
    else if (event.key === "k") moveTurn(-1);
    else if (event.key === "w") {
      const turn = current();
      const button = turn && turn.querySelector("[data-mark-turn]");
      if (button) button.click();
    }
  });
  window.trajectoryTurnsLoaded = list.querySelectorAll("li.turn").length;
  // A link to a turn fires `load-now` on the pending row, which does nothing until htmx has processed the
  // page. htmx does that on DOMContentLoaded and then fires htmx:load on the body; this deferred file runs
  // before DOMContentLoaded, and a timer set here may run before htmx's handler does (it did, under load:
  // the row was marked requested and never loaded), so wait for the body's htmx:load.
  function followHashOnceReady(event) {
    if (event.target !== document.body) return;
    document.body.removeEventListener("htmx:load", followHashOnceReady);
    followHash();
  }
  if (document.readyState === "complete") window.setTimeout(followHash, 0);
  else document.body.addEventListener("htmx:load", followHashOnceReady);
})();
