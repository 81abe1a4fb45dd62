// Small DOM helpers every panel of the run page uses. Model output, names and metric keys are untrusted:
// they reach the DOM only as textContent.

export function text(tag, content, className) {
  const node = document.createElement(tag);
  node.textContent = content;
  if (className) node.className = className;
  return node;
}

// A number to `digits` decimals by the one rounding rule of every figure the run shows — the trainer's
// log lines (Python's format(x, ".3f")) and the templates' |fixed filter (webapp/core/templatetags/numbers.py):
// the exact binary value rounded, an exact tie to even. toFixed alone sends ties up: 0.5625 read 0.563 in
// the header while the log said 0.562.
export function fixed(value, digits) {
  const rounded = value.toFixed(digits);
  const exact = Math.abs(value).toFixed(Math.min(100, digits + 60));
  const dot = exact.indexOf(".");
  if (!/^50*$/.test(exact.slice(dot + 1 + digits))) return rounded;  // not a tie: toFixed is right
  const down = exact.slice(0, digits ? dot + 1 + digits : dot);
  if (Number(down.charAt(down.length - 1)) % 2) return rounded;  // odd: the tie goes up, to even
  return (value < 0 ? "-" : "") + down;
}

export function fmt(value) {
  return typeof value === "number" ? fixed(value, 3) : "—";
}

// GET a JSON answer of the page's own API (the session cookie signs it in).
export function getJson(url) {
  return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
}

// A task as every page shows it (webapp/rollouts/templatetags/task_tags.py): its prompt's first line, the whole
// prompt on hover, and the expected answer; its id where the trainer sent no prompt.
export function taskNodes(source) {
  const nodes = [];
  const headline = source.task || source.task_id;
  const name = text(source.task && source.task !== source.task_id ? "span" : "code", headline, "task-text");
  name.title = source.task_hover || ("task " + source.task_id);
  name.dataset.task = "";
  nodes.push(name);
  if (source.answer) {
    const answer = text("span", " expected ", "task-answer muted small");
    answer.appendChild(text("strong", source.answer.length > 80 ? source.answer.slice(0, 79) + "…" : source.answer));
    answer.dataset.taskAnswer = "";
    nodes.push(answer);
  }
  return nodes;
}
