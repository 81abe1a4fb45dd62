// Small DOM helpers every panel of the run page uses. Model output, names and metric keys are untrusted:
// they reach the DOM only as textContent.

export function text(tag, content, className) {
  const node = document.createElement(tag);
  node.textContent = content;
  if (className) node.className = className;
  return node;
}

export function fmt(value) {
  return typeof value === "number" ? value.toFixed(3) : "—";
}

// Same format as the template's (UTC, the server's TIME_ZONE): "Y-m-d H:i:s" (length 19) or "Y-m-d H:i" (16).
export function utc(iso, length) {
  const when = new Date(iso);
  return isNaN(when.getTime()) ? null : when.toISOString().replace("T", " ").slice(0, length);
}

// GET a JSON answer of the page's own API (the session cookie signs it in).
export function getJson(url) {
  return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
}

// A task as every page shows it (templates/rollouts/_task.html): its prompt's first line, the whole
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
