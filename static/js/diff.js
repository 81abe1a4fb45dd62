// Diff page: hide identical turns, and step through the changed rows with a button or n / p.
// Only classes and scrolling change here; the highlighted text is server-escaped HTML.
(function () {
  "use strict";
  const rows = document.querySelector("[data-diff-rows]");
  if (!rows) return;
  const onlyChanges = document.querySelector("[data-changes-only]");
  const nextButton = document.querySelector("[data-next-change]");
  let cursor = -1;

  function changed() { return Array.from(rows.querySelectorAll(".diff-row-left.row-changed")); }

  function go(delta) {
    const list = changed();
    if (!list.length) return;
    rows.querySelectorAll(".cursor").forEach(function (el) { el.classList.remove("cursor"); });
    cursor = (cursor + delta + list.length) % list.length;
    const index = list[cursor].dataset.row;
    rows.querySelectorAll('[data-row="' + index + '"]').forEach(function (el) { el.classList.add("cursor"); });
    list[cursor].scrollIntoView({ block: "center" });
  }

  if (onlyChanges) {
    onlyChanges.addEventListener("change", function () { rows.classList.toggle("changes-only", onlyChanges.checked); });
  }
  if (nextButton) nextButton.addEventListener("click", function () { go(1); });
  document.addEventListener("keydown", function (event) {
    if (event.target.closest("input, textarea, select") || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "n") go(1);
    else if (event.key === "p") go(-1);
  });
})();
