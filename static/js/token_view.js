// Trajectory page, token view: each model turn that carries token statistics (a JSON block the server
// rendered into the turn, webapp/rollouts/selectors/trajectories.py:token_view) can show its text token by token,
// coloured by the statistic chosen above the turns — sampling log-prob, entropy, advantage × loss mask,
// or the learner − sampler log-prob gap. Tokens whose |gap| passes the threshold get a red outline; masked
// tokens (and whole masked turns: tool output, prompts) are hatched. Hovering a token shows its text, id
// and values. Turns that htmx loads later are drawn as they arrive.
// Token text is model output: it is only ever set as textContent, never parsed as HTML.
(function () {
  "use strict";
  const list = document.querySelector("[data-turns]");
  const controls = document.querySelector("[data-token-controls]");
  if (!list || !controls) return;
  const select = controls.querySelector("[data-token-quantity]");
  const thresholdInput = controls.querySelector("[data-token-threshold]");
  const legend = controls.querySelector("[data-token-legend]");
  const flaggedNote = controls.querySelector("[data-token-flagged]");
  const tip = document.querySelector("[data-token-tip]");

  const LABELS = {
    logprob: "sampling log-prob",
    entropy: "entropy",
    advantage: "advantage × mask",
    gap: "log-prob gap",
  };
  // How each quantity maps to a colour: a value → [hue, strength 0..1].
  const SCALES = {
    // The token's probability: red where the sampler thought it unlikely.
    logprob: { low: "p = 0", high: "p = 1", colour: function (v) { return [0, 1 - Math.exp(v)]; } },
    // Nats: orange where the policy was unsure (4 nats and more at full strength).
    entropy: { low: "0 nats", high: "≥ 4 nats", colour: function (v) { return [30, Math.min(v / 4, 1)]; } },
    advantage: { diverging: true },
    gap: { diverging: true },
  };

  function data(turn) {
    const node = turn.querySelector(":scope > script[type='application/json']");
    if (!node) return null;
    if (!turn._tokenData) turn._tokenData = JSON.parse(node.textContent);
    return turn._tokenData;
  }

  function threshold() {
    const value = parseFloat(thresholdInput.value);
    return isFinite(value) && value >= 0 ? value : Infinity;
  }

  // The largest |value| of a diverging quantity over the loaded turns: its scale's end.
  function spread(quantity) {
    let most = 0;
    list.querySelectorAll("li.turn").forEach(function (turn) {
      const d = data(turn);
      (d && d[quantity] || []).forEach(function (v) { if (v !== null) most = Math.max(most, Math.abs(v)); });
    });
    return most || 1;
  }

  function background(quantity, value, scaleEnd) {
    if (value === null || value === undefined) return "";
    let hue, strength;
    if (SCALES[quantity].diverging) {
      hue = value < 0 ? 0 : 140;
      strength = Math.min(Math.abs(value) / scaleEnd, 1);
    } else {
      [hue, strength] = SCALES[quantity].colour(value);
    }
    return "hsla(" + hue + ", 85%, 50%, " + (0.08 + 0.6 * Math.max(0, strength)).toFixed(3) + ")";
  }

  function format(v) { return v === null || v === undefined ? "—" : (Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3)); }

  function drawLegend(quantity, scaleEnd) {
    legend.textContent = "";
    legend.hidden = !quantity;
    if (!quantity) return;
    const low = document.createElement("span");
    const bar = document.createElement("span");
    const high = document.createElement("span");
    bar.className = "token-legend-bar";
    if (SCALES[quantity].diverging) {
      low.textContent = "−" + format(scaleEnd);
      high.textContent = "+" + format(scaleEnd);
      bar.style.background = "linear-gradient(90deg, " + background(quantity, -scaleEnd, scaleEnd) + ", "
        + background(quantity, 0, scaleEnd) + ", " + background(quantity, scaleEnd, scaleEnd) + ")";
    } else {
      const s = SCALES[quantity];
      low.textContent = s.low;
      high.textContent = s.high;
      const ends = quantity === "logprob" ? [-20, 0] : [0, 4];
      bar.style.background = "linear-gradient(90deg, " + background(quantity, ends[0], 1) + ", "
        + background(quantity, ends[1], 1) + ")";
    }
    const masked = document.createElement("span");
    masked.className = "token masked legend-masked";
    masked.textContent = "masked (no loss)";
    const flagged = document.createElement("span");
    flagged.className = "token flagged legend-flagged";
    flagged.textContent = "|gap| ≥ " + thresholdInput.value;
    legend.append(LABELS[quantity] + ": ", low, bar, high, masked, flagged);
  }

  function drawTurn(turn, quantity, scaleEnd, flagAt) {
    const d = data(turn);
    let box = turn.querySelector(":scope > .token-text");
    const text = turn.querySelector(":scope > .turn-text");
    if (!d || !quantity) {
      if (box) box.remove();
      if (text) text.hidden = false;
      return 0;
    }
    if (!box) {
      box = document.createElement("div");
      box.className = "token-text";
      (text || turn.querySelector(".turn-head")).after(box);
    }
    if (text) text.hidden = true;
    box.textContent = "";
    let flagged = 0;
    const values = d[quantity] || [];
    const gaps = d.gap || [];
    d.ids.forEach(function (id, i) {
      const span = document.createElement("span");
      span.className = "token";
      span.dataset.index = String(i);
      span.textContent = d.pieces ? d.pieces[i] : "⟨" + id + "⟩";
      if (d.mask.length && !d.mask[i]) span.classList.add("masked");
      else span.style.background = background(quantity, values[i], scaleEnd);
      if (gaps[i] !== null && gaps[i] !== undefined && Math.abs(gaps[i]) >= flagAt) {
        span.classList.add("flagged");
        flagged += 1;
      }
      box.append(span);
    });
    box.dataset.flagged = String(flagged);
    return flagged;
  }

  function draw() {
    const quantity = select.value;
    const scaleEnd = quantity && SCALES[quantity].diverging ? spread(quantity) : 1;
    const flagAt = threshold();
    list.classList.toggle("token-view", Boolean(quantity));
    let flagged = 0;
    list.querySelectorAll("li.turn").forEach(function (turn) { flagged += drawTurn(turn, quantity, scaleEnd, flagAt); });
    drawLegend(quantity, scaleEnd);
    flaggedNote.textContent = quantity ? flagged + " token" + (flagged === 1 ? "" : "s") + " past |gap| ≥ " + thresholdInput.value + " in the loaded turns" : "";
  }

  function showTip(span) {
    const turn = span.closest("li.turn");
    const d = turn && data(turn);
    if (!d) return;
    const i = Number(span.dataset.index);
    tip.textContent = "";
    const head = document.createElement("div");
    const token = document.createElement("code");
    token.textContent = d.pieces ? JSON.stringify(d.pieces[i]) : "(text not sent)";
    head.append(token, " id " + d.ids[i] + (d.mask.length && !d.mask[i] ? " · masked" : ""));
    tip.append(head);
    Object.keys(LABELS).forEach(function (name) {
      if (!d[name]) return;
      const row = document.createElement("div");
      row.textContent = LABELS[name] + ": " + format(d[name][i]);
      if (name === "gap" && span.classList.contains("flagged")) row.className = "neg";
      tip.append(row);
    });
    const box = span.getBoundingClientRect();
    tip.hidden = false;
    tip.style.left = Math.round(window.scrollX + box.left) + "px";
    tip.style.top = Math.round(window.scrollY + box.bottom + 4) + "px";
  }

  list.addEventListener("mouseover", function (event) {
    const span = event.target.closest && event.target.closest(".token-text .token");
    if (span) showTip(span);
  });
  list.addEventListener("mouseout", function (event) {
    if (event.target.closest && event.target.closest(".token-text .token")) tip.hidden = true;
  });
  select.addEventListener("change", draw);
  thresholdInput.addEventListener("input", draw);
  document.body.addEventListener("htmx:afterSettle", function () { if (select.value) draw(); });
})();
