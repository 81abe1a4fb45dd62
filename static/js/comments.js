// Collaboration panel on the trajectory page: Ctrl/Cmd+Enter posts a comment (the panel itself is
// server-rendered and swapped by htmx, so nothing here writes comment text into the page).
(function () {
  "use strict";
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey)) return;
    const target = event.target;
    if (!(target instanceof HTMLTextAreaElement)) return;
    const form = target.closest("form[data-comment-form]");
    if (form) { event.preventDefault(); form.requestSubmit(); }
  });
  // A notification links to #comment-N: mark that comment.
  const hash = window.location.hash;
  if (/^#comment-\d+$/.test(hash)) {
    const node = document.getElementById(hash.slice(1));
    if (node) node.classList.add("highlight");
  }
})();
