// Runs in <head>, before the page paints: the theme the person picked last (localStorage), else the
// system's (prefers-color-scheme, which the stylesheet follows when no data-theme is set).
(function () {
  "use strict";
  try {
    const picked = window.localStorage.getItem("theme");
    if (picked === "dark" || picked === "light") document.documentElement.dataset.theme = picked;
  } catch (error) { /* storage refused (private mode): follow the system */ }
})();
