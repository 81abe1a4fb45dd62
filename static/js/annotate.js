// Pairwise annotation, keyboard only: 1 = left, 2 = right, 3 = tie, 0 = both bad, Enter submits,
// ← / → move to the previous / next pair. In the rationale box keys type text: Enter still submits
// (Shift+Enter for a new line) and Esc leaves the box. No data from the pair is written by this
// script: it only toggles classes and reads the form.
(function () {
  "use strict";
  const form = document.getElementById("judgement-form");
  const prevLink = document.querySelector("[data-prev-link]");
  if (!form) {
    // Queue finished for this annotator: ← still reaches the last judgement.
    document.addEventListener("keydown", function (event) {
      if (event.key === "ArrowLeft" && prevLink) window.location.assign(prevLink.href);
    });
    return;
  }
  const rationale = form.querySelector("textarea[name=rationale]");
  const hint = form.querySelector("[data-judgement-hint]");
  const rationaleRequired = form.dataset.rationaleRequired === "true";
  const sides = { left: document.querySelector('[data-side="left"]'), right: document.querySelector('[data-side="right"]') };
  const KEYS = { "1": "left", "2": "right", "3": "tie", "0": "both_bad" };
  let submitting = false;

  function radio(value) { return form.querySelector('input[name=choice][value="' + value + '"]'); }
  function chosen() { const checked = form.querySelector("input[name=choice]:checked"); return checked ? checked.value : null; }

  function showChoice() {
    const value = chosen();
    ["left", "right"].forEach(function (name) {
      const node = sides[name];
      if (!node) return;
      node.classList.toggle("chosen", value === name);
      node.classList.toggle("tie", value === "tie");
      node.classList.toggle("both-bad", value === "both_bad");
    });
  }

  function say(message) {
    hint.textContent = message;
    hint.hidden = !message;
  }

  function choose(value) {
    const input = radio(value);
    if (!input) return;
    input.checked = true;
    say("");
    showChoice();
  }

  function trySubmit() {
    if (submitting) return;
    if (!chosen()) { say("Choose first: 1 left, 2 right, 3 tie, 0 both bad."); return; }
    if (rationaleRequired && rationale && !rationale.value.trim()) {
      say("This queue asks for a rationale: type it, then Enter.");
      rationale.focus();
      return;
    }
    submitting = true;
    form.requestSubmit();
  }

  form.addEventListener("submit", function (event) {
    // A click on the button goes through the same checks as Enter.
    if (!chosen() || (rationaleRequired && rationale && !rationale.value.trim())) {
      event.preventDefault();
      submitting = false;
      trySubmit();
    }
  });
  form.addEventListener("change", showChoice);

  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey || event.isComposing) return;
    const target = event.target;
    const typing = target instanceof HTMLTextAreaElement || (target instanceof HTMLInputElement && target.type === "text");
    if (typing) {
      if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); trySubmit(); }
      else if (event.key === "Escape") { target.blur(); }
      return;
    }
    if (Object.prototype.hasOwnProperty.call(KEYS, event.key)) {
      event.preventDefault();
      choose(KEYS[event.key]);
    } else if (event.key === "Enter") {
      event.preventDefault();
      trySubmit();
    } else if (event.key === "ArrowLeft" && form.dataset.prevUrl) {
      event.preventDefault();
      window.location.assign(form.dataset.prevUrl);
    } else if (event.key === "ArrowRight" && form.dataset.nextUrl) {
      event.preventDefault();
      window.location.assign(form.dataset.nextUrl);
    }
  });

  showChoice();
  window.annotateReady = true;
  form.dataset.ready = ""; // for tests under the Content-Security-Policy, which wait on the DOM
})();
