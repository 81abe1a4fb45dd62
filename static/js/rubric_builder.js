// Rubric builder: add, remove and reorder criterion rows; swap a row's params fields when its kind
// changes. Rows post as criteria-<i>-<field>; after every change the rows are renumbered in page
// order, so the server reads the criteria in the order the user sees them.
(function () {
  "use strict";
  const form = document.getElementById("rubric-form");
  if (!form) return;
  const rows = document.getElementById("criteria-rows");
  const template = document.getElementById("criterion-row-template");
  const paramsUrl = form.dataset.paramsUrl;
  const ROW_PREFIX = /criteria-(\d+|__prefix__)-/g;

  function renumber() {
    rows.querySelectorAll("[data-criterion-row]").forEach(function (row, index) {
      row.querySelectorAll("[name], [id], label[for], [aria-describedby]").forEach(function (el) {
        ["name", "id", "for", "aria-describedby"].forEach(function (attr) {
          const value = el.getAttribute(attr);
          if (value) el.setAttribute(attr, value.replace(ROW_PREFIX, "criteria-" + index + "-"));
        });
      });
      const number = row.querySelector("[data-row-number]");
      if (number) number.textContent = String(index + 1);
      const up = row.querySelector('[data-action="up"]');
      const down = row.querySelector('[data-action="down"]');
      if (up) up.disabled = index === 0;
      if (down) down.disabled = index === rows.children.length - 1;
    });
  }

  function rowPrefix(row) {
    const kind = row.querySelector('select[name$="-kind"]');
    return kind.name.replace(/-kind$/, "");
  }

  function loadParams(row) {
    const kind = row.querySelector('select[name$="-kind"]').value;
    const target = row.querySelector("[data-criterion-params]");
    const url = paramsUrl + "?kind=" + encodeURIComponent(kind) + "&prefix=" + encodeURIComponent(rowPrefix(row) + "-params");
    window.htmx.ajax("GET", url, { target: target, swap: "innerHTML" });
  }

  function addRow() {
    const fragment = template.content.cloneNode(true);
    const row = fragment.querySelector("[data-criterion-row]");
    rows.appendChild(fragment);
    renumber();
    const name = row.querySelector('input[name$="-name"]');
    if (name) name.focus();
  }

  form.addEventListener("click", function (event) {
    const button = event.target.closest("[data-action]");
    if (!button) return;
    const action = button.dataset.action;
    if (action === "add") { addRow(); return; }
    const row = button.closest("[data-criterion-row]");
    if (!row) return;
    if (action === "remove") {
      const next = row.nextElementSibling || row.previousElementSibling;
      row.remove();
      renumber();
      const focusTarget = next ? next.querySelector('input[name$="-name"]') : form.querySelector('[data-action="add"]');
      if (focusTarget) focusTarget.focus();
    } else if (action === "up" && row.previousElementSibling) {
      rows.insertBefore(row, row.previousElementSibling);
      renumber();
      button.disabled ? row.querySelector('[data-action="down"]').focus() : button.focus();
    } else if (action === "down" && row.nextElementSibling) {
      rows.insertBefore(row.nextElementSibling, row);
      renumber();
      button.disabled ? row.querySelector('[data-action="up"]').focus() : button.focus();
    }
  });

  form.addEventListener("change", function (event) {
    if (event.target.matches('select[name$="-kind"]') && event.target.closest("[data-criterion-row]")) {
      loadParams(event.target.closest("[data-criterion-row]"));
    }
  });

  renumber();
})();
