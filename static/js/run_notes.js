// A run's tags and note, edited in place (templates/experiments/_run_notes.html) on the runs list and the
// run page: Edit shows the form, Save posts it and redraws the tags and note from the reply. Text is
// written with textContent only.
(function () {
  "use strict";
  const csrf = function (form) { return form.querySelector('[name="csrfmiddlewaretoken"]').value; };

  function redraw(block, data) {
    const tags = block.querySelector("[data-run-tags]");
    const listUrl = block.dataset.listUrl;
    tags.textContent = "";
    data.tags.forEach(function (name) {
      const link = document.createElement("a");
      link.className = "tag";
      link.href = (listUrl || "../") + "?tag=" + encodeURIComponent(name);
      link.textContent = name;
      tags.appendChild(link);
      tags.appendChild(document.createTextNode(" "));
    });
    const note = block.querySelector("[data-run-note]");
    const compact = note.classList.contains("compact");
    note.title = data.note;
    note.textContent = compact && data.note.length > 80 ? data.note.slice(0, 79) + "…" : data.note;
    if (!data.note && !data.tags.length) note.textContent = compact ? "—" : "No tags or note yet.";
  }

  document.querySelectorAll("[data-run-notes]").forEach(function (block) {
    const view = block.querySelector("[data-run-notes-view]");
    const form = block.querySelector("[data-run-notes-form]");
    const edit = block.querySelector("[data-run-notes-edit]");
    if (!form || !edit) return;
    const errors = form.querySelector("[data-run-notes-errors]");
    const close = function () { form.hidden = true; view.hidden = false; edit.focus(); };
    edit.addEventListener("click", function () {
      view.hidden = true; form.hidden = false; errors.hidden = true;
      form.querySelector('[name="tags"]').focus();
    });
    form.querySelector("[data-run-notes-cancel]").addEventListener("click", close);
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      const body = new FormData(form);
      fetch(form.action, {
        method: "POST", body: body, credentials: "same-origin",
        headers: { Accept: "application/json", "X-CSRFToken": csrf(form) },
      }).then(function (response) {
        return response.json().then(function (data) { return { ok: response.ok, data: data }; });
      }).then(function (result) {
        if (!result.ok) {
          const messages = [];
          Object.keys(result.data.errors || {}).forEach(function (k) { messages.push.apply(messages, result.data.errors[k]); });
          errors.textContent = messages.join(" ") || "Could not save.";
          errors.hidden = false;
          return;
        }
        form.querySelector('[name="tags"]').value = result.data.tags.join(", ");
        form.querySelector('[name="note"]').value = result.data.note;
        redraw(block, result.data);
        close();
      }).catch(function () {
        errors.textContent = "Could not save: the server did not answer. Try again.";
        errors.hidden = false;
      });
    });
  });
})();
