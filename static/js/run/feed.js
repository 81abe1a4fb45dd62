// The rollout feed: each trajectories event's groups (training and evaluation listed apart, the newest
// first, at most FEED_GROUPS each), with each group's best and worst sample; pausable; and the list of a
// histogram cell's trajectories when one is clicked (histogram.js). Model output is shown as text.
import { fmt, taskNodes, text } from "./dom.js";
import { root, state, ui } from "./state.js";

export const FEED_GROUPS = 24;

function trajectoryLink(id, label) {
  const link = document.createElement("a");
  link.href = root.dataset.trajectoryBase + encodeURIComponent(String(id)) + "/";
  link.textContent = label;
  return link;
}

function sampleNode(sample, label, className) {
  const box = document.createElement("div");
  box.className = "sample " + className;
  const head = document.createElement("div");
  head.appendChild(text("span", label + " ", "label"));
  if (typeof sample.id === "number") head.appendChild(trajectoryLink(sample.id, "#" + sample.sample));
  box.appendChild(head);
  const detail = document.createElement("div");
  detail.appendChild(text("strong", "reward " + fmt(sample.reward)));
  const parts = (sample.components || []).map(function (c) { return c.name + " " + fmt(c.weighted); });
  if (parts.length) detail.appendChild(text("span", " · weighted: " + parts.join(" · "), "muted small"));
  box.appendChild(detail);
  if (sample.hacking) box.appendChild(text("div", sample.hacking, "badge hacking"));
  box.appendChild(text("pre", sample.final || "(no final answer)"));
  return box;
}

function groupHead(step, group) {
  const head = document.createElement("div");
  head.className = "head";
  head.appendChild(text("span", "step " + step + " · " + group.split + " group " + group.group + " · "));
  taskNodes(group).forEach(function (node) { head.appendChild(node); });
  head.appendChild(text("span", " · mean " + fmt(group.mean) + " ± " + fmt(group.std) + " · " + group.size + " samples "));
  if (group.zero_variance) {
    const flag = text("span", "zero variance: no learning signal", "badge zero");
    flag.title = "Every sample got the same reward, so every advantage is 0.";
    head.appendChild(flag);
  }
  if (group.branches && root.dataset.groupsUrl) {
    const tree = text("a", "⑂ " + group.branches + " branch" + (group.branches === 1 ? "" : "es"), "badge branches");
    tree.href = root.dataset.groupsUrl + encodeURIComponent(String(step)) + "/" +
      encodeURIComponent(String(group.group)) + "/?split=" + encodeURIComponent(group.split);
    tree.title = "A branching-rollouts group: see its tree (where it branched and why).";
    tree.setAttribute("data-feed-branches", "");
    head.appendChild(tree);
  }
  if (group.hacking) {
    const alarm = text("span", "possible reward hacking (" + group.hacking.count + ")", "badge hacking");
    alarm.title = group.hacking.message;
    head.appendChild(alarm);
  }
  return head;
}

function groupNode(step, group) {
  const item = document.createElement("li");
  item.appendChild(groupHead(step, group));
  if (group.best) item.appendChild(sampleNode(group.best, "best", "best"));
  if (group.worst && (!group.best || group.worst.id !== group.best.id)) {
    item.appendChild(sampleNode(group.worst, "worst", "worst"));
  }
  return item;
}

// Training groups and evaluation groups are listed apart: an evaluation's many groups never push the
// training rollouts out of view.
function showGroups(entries) {
  entries.forEach(function (entry) {
    const isEval = entry.group.split === "eval";
    const list = isEval ? ui.feedEval : ui.feed;
    const emptyKey = isEval ? "feedEvalEmpty" : "feedEmpty";
    if (ui[emptyKey]) { ui[emptyKey].remove(); ui[emptyKey] = null; }
    list.insertBefore(groupNode(entry.step, entry.group), list.firstChild);
    while (list.children.length > FEED_GROUPS) list.removeChild(list.lastChild);
  });
}

export function feedEvent(event) {
  const entries = (event.groups || []).map(function (group) { return { step: event.step, group: group }; });
  if (state.paused) {
    state.pausedGroups = state.pausedGroups.concat(entries).slice(-2 * FEED_GROUPS);
    ui.pausedCount.textContent = "(" + state.pausedGroups.length + " new)";
    return;
  }
  showGroups(entries);
}

export function showFeed() {
  const filtered = state.binFilter !== null;
  ui.feedFilter.hidden = !filtered;
  ui.feedFiltered.hidden = !filtered;
  ui.feed.hidden = filtered || state.feedTab !== "train";
  ui.feedEval.hidden = filtered || state.feedTab !== "eval";
  root.querySelectorAll("[data-live-feed-tab]").forEach(function (tab) {
    tab.setAttribute("aria-pressed", String(!filtered && tab.dataset.liveFeedTab === state.feedTab));
  });
}

export function rounded(value) { return String(Number(value.toPrecision(6))); }

function cellDescription(filter, count) {
  const steps = filter.stepMin === filter.stepMax ? "step " + filter.stepMin : "steps " + filter.stepMin + "–" + filter.stepMax;
  const range = filter.field === "length"
    ? "response length " + Math.round(filter.low) + "–" + (Math.round(filter.high) - (filter.last ? 0 : 1)) + " tokens"
    : "reward " + rounded(filter.low) + " to " + rounded(filter.high);
  return (filter.split === "eval" ? "Evaluation, " : "Training, ") + steps + ", " + range +
    ": " + count + (count === 50 ? "+" : "") + " trajectories";
}

function explorerUrl(filter) {
  let url = root.dataset.explorerUrl + "?run=" + encodeURIComponent(root.dataset.run) + "&split=" + filter.split +
    "&step_min=" + filter.stepMin + "&step_max=" + filter.stepMax;
  if (filter.field === "reward") url += "&reward_min=" + rounded(filter.low) + "&reward_max=" + rounded(filter.high);
  else url += "&length_min=" + Math.round(filter.low) + "&length_max=" + (Math.round(filter.high) - (filter.last ? 0 : 1));
  return url;
}

function cellRow(row) {
  const item = document.createElement("li");
  item.dataset.trajectory = String(row.id);
  item.appendChild(trajectoryLink(row.id, "#" + row.id));
  item.appendChild(text("span", " step " + row.step + " · group " + row.group + " sample " + row.sample + " · "));
  taskNodes(row).forEach(function (node) { item.appendChild(node); });
  item.appendChild(text("span", " · reward " + fmt(row.reward) + " · " + row.completion_tokens + " tokens" +
    (row.status !== "ok" ? " · " + row.status : "")));
  return item;
}

// A histogram cell's trajectories in place of the feed, with a link to the same set in the explorer.
export function showFiltered(filter, rows) {
  ui.feedFilterText.textContent = cellDescription(filter, rows.length);
  ui.feedFilterExplorer.href = explorerUrl(filter);
  ui.feedFiltered.textContent = "";
  rows.forEach(function (row) { ui.feedFiltered.appendChild(cellRow(row)); });
  if (!rows.length) ui.feedFiltered.appendChild(text("li", "No trajectories in this cell any more.", "muted"));
  showFeed();
}

export function startFeed() {
  ui.feedFilterClear.addEventListener("click", function () { state.binFilter = null; showFeed(); });
  root.querySelectorAll("[data-live-feed-tab]").forEach(function (tab) {
    tab.addEventListener("click", function () {
      state.feedTab = tab.dataset.liveFeedTab;
      state.binFilter = null;
      showFeed();
    });
  });
  ui.pause.addEventListener("change", function () {
    state.paused = ui.pause.checked;
    if (!state.paused) {
      showGroups(state.pausedGroups);
      state.pausedGroups = [];
      ui.pausedCount.textContent = "";
    }
  });
  showFeed();
}
