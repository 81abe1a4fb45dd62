// Trajectory page, huge trajectories: the list of turns keeps at most MAX_TURNS in the page — when scrolling
// has loaded more, the earliest ones (above the screen) are let go and a "Turns before #N" link takes their
// place (it reopens the page at N) — and a search box finds turns anywhere in the trajectory (the server
// searches; each hit opens the page at its turn, ?from=N). Snippets are model output: text only.
(function () {
  "use strict";
  const DEFAULT_MAX_TURNS = 400;  // data-max-turns on the list overrides it
  const list = document.querySelector("[data-turns]");
  if (!list) return;

  function trim() {
    const turns = list.querySelectorAll(":scope > li.turn");
    const extra = turns.length - (Number(list.dataset.maxTurns) || DEFAULT_MAX_TURNS);
    if (extra <= 0) return;
    const keep = turns[extra];
    const before = keep.getBoundingClientRect().top;
    for (let i = 0; i < extra; i += 1) turns[i].remove();
    const first = Number(keep.dataset.turn);
    let row = list.querySelector(":scope > [data-turns-earlier]");
    if (!row) {
      row = document.createElement("li");
      row.className = "turns-more";
      row.dataset.turnsEarlier = "";
      const link = document.createElement("a");
      link.dataset.turnsEarlierLink = "";
      row.append(link);
      list.prepend(row);
    }
    const link = row.querySelector("a");
    link.href = "?from=" + Math.max(0, first - 60) + "#turn-" + (first - 1);
    link.textContent = "Turns before #" + first;
    // Keep what the reader looks at where it was.
    window.scrollBy(0, keep.getBoundingClientRect().top - before);
    list.dataset.firstLoaded = String(first);
  }
  document.body.addEventListener("htmx:afterSettle", trim);

  const form = document.querySelector("[data-turn-search]");
  if (!form) return;
  const input = form.querySelector("[data-turn-search-input]");
  const note = form.querySelector("[data-turn-search-note]");
  const results = document.querySelector("[data-turn-search-results]");
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    const query = input.value.trim();
    if (!query) return;
    note.textContent = "searching…";
    fetch(form.dataset.searchUrl + "?q=" + encodeURIComponent(query), { credentials: "same-origin" })
      .then(function (response) { return response.json(); })
      .then(function (body) {
        results.textContent = "";
        if (body.errors) { note.textContent = body.errors.q.join(" "); results.hidden = true; return; }
        const count = body.matches.length;
        note.textContent = count ? count + (body.more ? "+" : "") + " turn" + (count === 1 && !body.more ? "" : "s") + " match" : "no turn matches";
        body.matches.forEach(function (match) {
          const item = document.createElement("li");
          const link = document.createElement("a");
          link.href = "?from=" + match.index + "#turn-" + match.index;
          link.dataset.turnSearchHit = String(match.index);
          link.textContent = "#" + match.index + " " + match.role;
          const snippet = document.createElement("span");
          snippet.className = "muted small";
          snippet.textContent = " " + match.snippet;
          item.append(link, snippet);
          results.append(item);
        });
        results.hidden = count === 0;
      })
      .catch(function () { note.textContent = "The search failed; try again."; });
  });
})();
