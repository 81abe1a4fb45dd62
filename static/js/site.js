// What every page shares: the collapsing nav, the dark-mode toggle, a confirm dialog for forms marked
// `data-confirm="question"`, and the keyboard-shortcut sheet that `?` opens. Pages list their own keys
// in the sheet with {% block shortcuts %}.
(function () {
  "use strict";
  const root = document.documentElement;

  // --- nav: collapses into a menu button on narrow screens ---------------------------------------
  const topbar = document.querySelector(".topbar");
  const navToggle = document.querySelector("[data-nav-toggle]");
  if (topbar && navToggle) {
    navToggle.addEventListener("click", function () {
      const open = topbar.classList.toggle("open");
      navToggle.setAttribute("aria-expanded", String(open));
    });
  }

  // --- theme: light / dark, remembered in localStorage -------------------------------------------
  function systemDark() { return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches; }
  function currentTheme() { return root.dataset.theme || (systemDark() ? "dark" : "light"); }
  const themeToggle = document.querySelector("[data-theme-toggle]");
  function showTheme() {
    if (!themeToggle) return;
    const dark = currentTheme() === "dark";
    themeToggle.setAttribute("aria-pressed", String(dark));
    themeToggle.title = dark ? "Switch to light mode" : "Switch to dark mode";
    themeToggle.textContent = dark ? "☀" : "☾";
  }
  // Whatever draws its own colours (the charts, static/js/charts.js) listens for "themechange".
  function themeChanged() {
    showTheme();
    document.dispatchEvent(new CustomEvent("themechange", { detail: { theme: currentTheme() } }));
  }
  function toggleTheme() {
    const next = currentTheme() === "dark" ? "light" : "dark";
    root.dataset.theme = next;
    try { window.localStorage.setItem("theme", next); } catch (error) { /* not remembered */ }
    themeChanged();
  }
  if (themeToggle) themeToggle.addEventListener("click", toggleTheme);
  showTheme();
  // The system's preference changing (a desktop that turns dark at dusk) changes a page whose theme
  // nobody picked: the stylesheet follows by itself, the toggle's icon and the charts are told.
  const systemQuery = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  if (systemQuery && systemQuery.addEventListener) {
    systemQuery.addEventListener("change", function () { if (!root.dataset.theme) themeChanged(); });
  }

  // --- confirm dialogs ------------------------------------------------------------------------------
  const confirmDialog = document.querySelector("[data-confirm-dialog]");
  let pendingForm = null;
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) return;
    if (!confirmDialog || typeof confirmDialog.showModal !== "function") return;  // posts as it is
    event.preventDefault();
    pendingForm = form;
    confirmDialog.querySelector("[data-confirm-text]").textContent = form.dataset.confirm;
    const yes = confirmDialog.querySelector("[data-confirm-yes]");
    const button = form.querySelector("button[type=submit], button:not([type])");
    yes.textContent = (button && button.textContent.trim()) || "Confirm";
    confirmDialog.showModal();
  });
  if (confirmDialog) {
    confirmDialog.querySelector("[data-confirm-no]").addEventListener("click", function () {
      pendingForm = null;
      confirmDialog.close();
    });
    confirmDialog.querySelector("[data-confirm-yes]").addEventListener("click", function () {
      confirmDialog.close();
      if (pendingForm) pendingForm.submit();  // submit() skips the submit handler: no second question
    });
  }

  // --- keyboard shortcuts ---------------------------------------------------------------------------
  const sheet = document.querySelector("[data-shortcuts]");
  function typing(target) {
    return target && target.closest && target.closest("input, textarea, select, [contenteditable=true]");
  }
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    if (event.key === "?" && sheet && typeof sheet.showModal === "function") {
      event.preventDefault();
      if (sheet.open) sheet.close(); else sheet.showModal();
    } else if (event.key === "D" && event.shiftKey) {
      toggleTheme();
    }
  });
  const sheetOpener = document.querySelector("[data-shortcuts-open]");
  if (sheet && sheetOpener) sheetOpener.addEventListener("click", function () { sheet.showModal(); });
  if (sheet) {
    sheet.querySelector("[data-shortcuts-close]").addEventListener("click", function () { sheet.close(); });
  }
  window.siteReady = true;
})();
