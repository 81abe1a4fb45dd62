// The cancel button asks first (a <dialog>; without script the form posts as it is). Once confirmed, the
// request shows at once: the cancel-requested badges, and the button stops offering itself while the
// post goes.
import { setCancelRequested } from "./page_state.js";
import { state } from "./state.js";

// Which of the dialog's cases applies now: a queued run is dropped; a running one saves a checkpoint of the
// last step it finished (none before the first: trainers.recipes.grpo.cancel_outcome writes the same in the log);
// an external trainer decides for itself.
export function cancelOutcome(status, step, external) {
  if (external) return "external";
  if (status === "QUEUED") return "queued";
  return step > 0 ? "after-step" : "no-step";
}

function showOutcome(dialog) {
  const outcome = cancelOutcome(state.status, state.currentStep, dialog.hasAttribute("data-external"));
  dialog.querySelectorAll("[data-cancel-outcome]").forEach(function (p) { p.hidden = p.dataset.cancelOutcome !== outcome; });
  const step = dialog.querySelector("[data-cancel-outcome-step]");
  if (step) step.textContent = String(state.currentStep);
}

export function bindCancelDialog() {
  const dialog = document.querySelector("[data-cancel-dialog]");
  let cancelForm = null;
  document.querySelectorAll("[data-confirm-cancel]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!dialog || typeof dialog.showModal !== "function") return;
      event.preventDefault();
      cancelForm = form;
      showOutcome(dialog);
      dialog.showModal();
    });
  });
  if (!dialog) return;
  dialog.querySelector("[data-cancel-dialog-keep]").addEventListener("click", function () { dialog.close(); });
  dialog.querySelector("[data-cancel-dialog-confirm]").addEventListener("click", function () {
    dialog.close();
    if (!cancelForm) return;
    setCancelRequested(true);
    cancelForm.querySelectorAll("button").forEach(function (button) {
      button.disabled = true;
      button.textContent = "Cancelling…";
    });
    cancelForm.submit();  // submit() skips the submit handler: no second question
  });
}
