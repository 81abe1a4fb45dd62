// Where a queued run stands (webapp.fleet.selectors.queue_states; templates/experiments/_run_queue.html
// renders the same): from the snapshot and the server's seq-less `queue` messages sent when a run ahead
// starts or ends or a worker of the queue comes or goes. Names travel as text, never as HTML.
import { text } from "./dom.js";

function writeAhead(ahead, queue) {
  ahead.textContent = "";
  if (!queue.ahead_count) {
    ahead.textContent = "Nothing ahead: it starts as soon as a worker of the queue takes it.";
    return;
  }
  ahead.appendChild(document.createTextNode("Ahead: "));
  queue.ahead.forEach(function (row, index) {
    if (index) ahead.appendChild(document.createTextNode(", "));
    const link = text("a", row.name);
    link.href = row.url;
    ahead.appendChild(link);
    ahead.appendChild(document.createTextNode(" "));
    ahead.appendChild(text("span", "(" + String(row.status).toLowerCase() + ")", "muted"));
  });
  if (queue.ahead_unnamed) {
    ahead.appendChild(document.createTextNode((queue.ahead.length ? " and " : "") + queue.ahead_unnamed +
      " more run" + (queue.ahead_unnamed === 1 ? "" : "s") + " (other projects' runs are not named)"));
  }
  ahead.appendChild(document.createTextNode("."));
}

function writeWorkers(workers, queue) {
  workers.textContent = "";
  if (!queue.workers.length) {
    workers.textContent = "No worker online serves this queue.";
    return;
  }
  workers.appendChild(document.createTextNode("Served by "));
  queue.workers.forEach(function (worker, index) {
    if (index) workers.appendChild(document.createTextNode(", "));
    workers.appendChild(document.createTextNode(worker.hostname + " "));
    workers.appendChild(text("span", worker.busy ? "(busy)" : "(idle)", "muted"));
  });
  workers.appendChild(document.createTextNode("."));
}

export function setQueue(queue) {
  const panel = document.querySelector("[data-run-queue]");
  if (!panel) return;
  panel.hidden = !queue;
  if (!queue) return;
  panel.querySelector("[data-run-queue-position]").textContent =
    "Position " + queue.position + " on the " + queue.queue + " queue";
  const warning = panel.querySelector("[data-run-queue-warning]");
  warning.textContent = queue.warning || "";
  warning.hidden = !queue.warning;
  writeAhead(panel.querySelector("[data-run-queue-ahead]"), queue);
  writeWorkers(panel.querySelector("[data-run-queue-workers]"), queue);
}
