// New-queue form: offer only the pairings that fit the chosen source, and hide the split for
// evaluation-task pairs (they always use the evaluation split). The server validates all of it again.
(function () {
  "use strict";
  const form = document.getElementById("queue-form");
  if (!form) return;
  const pairing = form.querySelector("select[name=pairing]");
  const groupOnly = form.querySelectorAll("[data-group-only]");
  const FITS = { group: ["all", "best_worst"], checkpoints: ["all", "first_last"] };

  function source() {
    const checked = form.querySelector("input[name=source]:checked");
    return checked ? checked.value : "group";
  }

  function update() {
    const fits = FITS[source()] || [];
    Array.prototype.forEach.call(pairing.options, function (option) {
      option.disabled = fits.indexOf(option.value) === -1;
      option.hidden = option.disabled;
    });
    if (pairing.selectedOptions.length && pairing.selectedOptions[0].disabled) pairing.value = "all";
    groupOnly.forEach(function (node) { node.hidden = source() !== "group"; });
  }

  form.addEventListener("change", function (event) {
    if (event.target.name === "source") update();
  });
  update();
})();
