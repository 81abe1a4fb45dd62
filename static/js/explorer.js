// Trajectory explorer: copy the page's link, colour tags, tick rows to compare. Filtering and paging are plain GET forms and
// links that htmx turns into swaps of #explorer-results. Data reaches the DOM as text only.
(function () {
  "use strict";
  const HEX_COLOR = /^#[0-9a-fA-F]{3,8}$/;

  function colourTags(root) {
    root.querySelectorAll("[data-tag-color]").forEach(function (badge) {
      const colour = badge.getAttribute("data-tag-color");
      if (HEX_COLOR.test(colour)) {
        badge.style.borderLeft = "4px solid " + colour;
      }
    });
  }

  const copy = document.querySelector("[data-explorer-copy]");
  if (copy && navigator.clipboard) {
    copy.hidden = false;
    copy.addEventListener("click", function () {
      navigator.clipboard.writeText(window.location.href).then(function () {
        copy.textContent = "Link copied";
        window.setTimeout(function () { copy.textContent = "Copy link"; }, 1500);
      });
    });
  }

  // "/" focuses the text search, as in most search pages.
  document.addEventListener("keydown", function (event) {
    const target = event.target;
    const typing = target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement ||
      target instanceof HTMLSelectElement || (target && target.isContentEditable);
    if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
      const box = document.getElementById("id_q");
      if (box) { event.preventDefault(); box.focus(); }
    }
  });

  // Ticking rows enables "Compare selected turn by turn" (static/js/compare_picks.js). The form and its rows
  // come with each results swap; without this script the form still submits the ticked rows.
  function countPicks() {
    const form = document.getElementById("compare-trajectories-form");
    if (form) window.RolloutComparePicks.update(form);
  }
  document.addEventListener("change", function (event) {
    if (event.target.matches && event.target.matches("[data-compare-pick]")) countPicks();
  });

  colourTags(document);
  countPicks();
  document.body.addEventListener("htmx:afterSwap", function (event) {
    if (event.target && event.target.id === "explorer-results") {
      colourTags(event.target);
      countPicks();
    }
  });
})();
