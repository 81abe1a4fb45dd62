// The cancel button asks first (a <dialog>; without script the form posts as it is). Once confirmed, the
// request shows at once: the cancel-requested badges, and the button stops offering itself while the
// post goes.
import { setCancelRequested } from "./page_state.js";

export function bindCancelDialog() {
  const dialog = document.querySelector("[data-cancel-dialog]");
  let cancelForm = null;
  document.querySelectorAll("[data-confirm-cancel]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!dialog || typeof dialog.showModal !== "function") return;
      event.preventDefault();
      cancelForm = form;
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
