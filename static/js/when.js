// Times in the reader's zone, with the zone named (the server renders UTC: webapp/core/templatetags/when.py).
// Every <time data-when> on the page is rewritten: "exact" → "29 Nov 2026, 06:15 CET", "seconds" → "29 Nov
// 2026, 06:15:46 CET" (a run's started / finished / heartbeat), "time" → "06:15 CET",
// "relative" → "5 minutes ago" (kept fresh each minute) whose title gives the exact time. Called on load and
// after each htmx swap; pages that add times themselves call localizeTimes(root), or build them with
// timeElement (the run page's live header and checkpoints) and clockTime (its log lines).

const exactFormat = new Intl.DateTimeFormat(undefined, {
  day: "numeric", month: "short", year: "numeric", hour: "2-digit", minute: "2-digit", timeZoneName: "short",
});
const secondsFormat = new Intl.DateTimeFormat(undefined, {
  day: "numeric", month: "short", year: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit",
  timeZoneName: "short",
});
const timeFormat = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", timeZoneName: "short" });
const clockFormat = new Intl.DateTimeFormat(undefined, {
  hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
});
const relativeFormat = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
const STEPS = [[60, "second"], [60, "minute"], [24, "hour"], [7, "day"], [4.35, "week"], [12, "month"]];

export const zoneName = Intl.DateTimeFormat().resolvedOptions().timeZone;

export function exactTime(date) { return exactFormat.format(date); }

// A log line's time of day in the reader's zone ("06:15:46"); the run page names the zone once.
export function clockTime(date) { return clockFormat.format(date); }

export function relativeTime(date, now = Date.now()) {
  let amount = (date.getTime() - now) / 1000;
  for (const [size, unit] of STEPS) {
    if (Math.abs(amount) < size) {
      if (unit === "second" && Math.abs(amount) < 45) return amount > 0 ? "in a moment" : "just now";
      return relativeFormat.format(Math.round(amount), unit);
    }
    amount /= size;
  }
  return relativeFormat.format(Math.round(amount), "year");
}

function localize(node) {
  const date = new Date(node.getAttribute("datetime"));
  if (Number.isNaN(date.getTime())) return;
  const style = node.dataset.when;
  const exact = secondsFormat.format(date) + " (" + zoneName + ")";
  if (style === "exact") node.textContent = exactFormat.format(date);
  else if (style === "seconds") node.textContent = secondsFormat.format(date);
  else if (style === "time") node.textContent = timeFormat.format(date);
  else node.textContent = relativeTime(date);
  node.title = exact;
  node.dataset.localized = "1";
}

// What `{% when iso style %}` renders, built in the page (times that arrive live): null for a bad `iso`.
export function timeElement(iso, style = "relative") {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return null;
  const node = document.createElement("time");
  node.setAttribute("datetime", date.toISOString());
  node.dataset.when = style;
  localize(node);
  return node;
}

export function localizeTimes(root = document) {
  root.querySelectorAll("time[data-when]").forEach(localize);
}

localizeTimes();
document.body.addEventListener("htmx:afterSettle", (event) => localizeTimes(event.target));
window.setInterval(() => {
  document.querySelectorAll('time[data-when="relative"]').forEach(localize);
}, 60_000);
window.localizeTimes = localizeTimes;
