// Run launcher: choosing a preset fills the knobs that presets set, and every knob that differs from
// the chosen preset is marked (those are what the run stores as overrides).
(function () {
  "use strict";
  const form = document.getElementById("run-form");
  if (!form) return;
  const presetKnobs = JSON.parse(document.getElementById("preset-knobs").textContent);
  const presetKeys = JSON.parse(document.getElementById("preset-keys").textContent);
  const presetSelect = form.querySelector('select[name="preset"]');

  function inputsNamed(name) {
    return Array.from(form.querySelectorAll('[name="' + CSS.escape(name) + '"]'));
  }

  function readValue(name) {
    const inputs = inputsNamed(name);
    if (!inputs.length) return undefined;
    const first = inputs[0];
    if (first.type === "checkbox" && inputs.length === 1 && first.value === "on") return first.checked;
    if (first.type === "checkbox") return inputs.filter(function (i) { return i.checked; }).map(function (i) { return i.value; });
    if (first.type === "number") return first.value === "" ? null : Number(first.value);
    if (first.classList.contains("json")) {
      try { return JSON.parse(first.value); } catch (e) { return first.value; }
    }
    return first.value;
  }

  function writeValue(name, value) {
    const inputs = inputsNamed(name);
    if (!inputs.length) return;
    const first = inputs[0];
    if (first.type === "checkbox" && inputs.length === 1 && first.value === "on") { first.checked = Boolean(value); return; }
    if (first.type === "checkbox") {
      inputs.forEach(function (i) { i.checked = Array.isArray(value) && value.indexOf(i.value) !== -1; });
      return;
    }
    if (first.classList.contains("json")) { first.value = JSON.stringify(value); return; }
    first.value = value === null || value === undefined ? "" : String(value);
  }

  function same(a, b) { return JSON.stringify(a) === JSON.stringify(b); }

  function markChanged() {
    const preset = presetKnobs[presetSelect.value] || {};
    Object.keys(preset).forEach(function (name) {
      const field = form.querySelector('[data-field="' + CSS.escape(name) + '"]');
      if (field) field.classList.toggle("changed", !same(readValue(name), preset[name]));
    });
  }

  presetSelect.addEventListener("change", function () {
    const preset = presetKnobs[presetSelect.value] || {};
    presetKeys.forEach(function (name) { if (name in preset) writeValue(name, preset[name]); });
    markChanged();
  });
  // Naming the model fills the knobs recommended for its size and says why (trainers.config).
  const modelInput = form.querySelector('[name="knob-model"]');
  const note = form.querySelector("[data-recommendation]");
  function showRecommendation(data) {
    const filled = Object.keys(data.fields || {});
    filled.forEach(function (name) { writeValue(name, data.fields[name]); });
    if (note) {
      note.querySelector("[data-recommendation-title]").textContent = filled.length
        ? "Filled for " + data.model + " (" + data.size + "): " + data.summary + "."
        : "No recommended settings for " + (data.model || "this model") + ".";
      note.querySelector("[data-recommendation-why]").textContent = data.why || "";
    }
    markChanged();
  }
  if (modelInput && form.dataset.recommendedUrl) {
    modelInput.addEventListener("change", function () {
      const url = form.dataset.recommendedUrl + "?model=" + encodeURIComponent(modelInput.value.trim());
      fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) { if (data) showRecommendation(data); })
        .catch(function () { /* the note keeps its last text; the knobs stay as typed */ });
    });
  }

  form.addEventListener("input", markChanged);
  form.addEventListener("change", markChanged);
  markChanged();
})();
