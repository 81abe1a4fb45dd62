// The discussion panel on the trajectory page. Ctrl/Cmd+Enter posts a comment or a reply. The panel is
// server-rendered and swapped by htmx, so nothing here writes comment text into the page: when a
// teammate changes the discussion (review_live.js re-dispatches the socket's event as
// `review:discussion`), the panel and that turn's thread are fetched again — keeping what the reader
// was typing in the comment box or a reply box, and which reply boxes were open.
(function () {
  "use strict";
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey)) return;
    const target = event.target;
    if (!(target instanceof HTMLTextAreaElement)) return;
    const form = target.closest("form[data-comment-form]");
    if (form) { event.preventDefault(); form.requestSubmit(); }
  });

  // A notification links to #comment-N: mark that comment.
  function highlightFromHash() {
    const hash = window.location.hash;
    if (/^#comment-\d+$/.test(hash)) {
      const node = document.getElementById(hash.slice(1));
      if (node) node.classList.add("highlight");
    }
  }
  highlightFromHash();

  const panel = document.getElementById("collaboration");
  if (!panel || !window.htmx) return;

  // What the reader has typed, by box: the new-comment box, each reply box (by thread), each edit box,
  // and the one-line boxes (a tag being typed, a flag's note).
  const BOXES = "textarea, input[type=text]";
  function keyOf(box) {
    const form = box.closest("form");
    if (!form) return null;
    if (box instanceof HTMLInputElement) return (form.id || form.getAttribute("action")) + ":" + box.name;
    if (form.id === "comment-form") return "new";
    if (form.dataset.replyForm) return "reply-" + form.dataset.replyForm;
    return form.getAttribute("action");
  }

  function drafts() {
    const kept = {};
    panel.querySelectorAll(BOXES).forEach(function (box) {
      const key = keyOf(box);
      const open = box.closest("details") ? box.closest("details").open : true;
      if (key && (box.value || open)) {
        kept[key] = { value: box.value, open: open, focused: document.activeElement === box,
          start: box.selectionStart, end: box.selectionEnd };
      }
    });
    const turn = panel.querySelector("#comment-form select[name=turn_index], #comment-form input[name=turn_index]");
    return { boxes: kept, turn: turn ? turn.value : null };
  }

  function restore(saved) {
    panel.querySelectorAll(BOXES).forEach(function (box) {
      const draft = saved.boxes[keyOf(box)];
      if (!draft) return;
      if (draft.value) box.value = draft.value;
      const details = box.closest("details");
      if (details && draft.open) details.open = true;
      if (draft.focused) { box.focus(); box.setSelectionRange(draft.start, draft.end); }
    });
    const turn = panel.querySelector("#comment-form select[name=turn_index], #comment-form input[name=turn_index]");
    if (turn && saved.turn !== null) turn.value = saved.turn;
  }

  // A teammate's event can arrive while the reader's own post is on its way (the server sends it at the
  // commit, before it answers the post): wait for the post's answer to be swapped in, or the box's text
  // would be kept as a draft and come back after the post. And a refresh fetched before a post of the
  // reader's may answer after it: its older panel is dropped (and fetched again), never swapped in.
  let posting = 0;
  let posts = 0;
  let refreshing = false;
  let again = false;
  function refreshPanel() {
    if (refreshing || posting > 0) { again = true; return; }
    refreshing = true;
    const postsBefore = posts;
    fetch(panel.dataset.panelUrl, { headers: { "HX-Request": "true" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) return;
        if (posts !== postsBefore || posting > 0) { again = true; return; }
        const saved = drafts();
        window.htmx.swap(panel, html, { swapStyle: "innerHTML" });
        window.htmx.process(panel);
        restore(saved);
        highlightFromHash();
        if (window.localizeTimes) window.localizeTimes(panel);
        window.discussionRefreshes = (window.discussionRefreshes || 0) + 1;
      })
      .catch(function () { /* the socket's next event, or a reconnect, fetches again */ })
      .finally(function () {
        refreshing = false;
        if (again && posting === 0) { again = false; refreshPanel(); }
      });
  }

  function refreshTurn(index) {
    const aside = document.querySelector('[data-turn-discussion="' + index + '"]');
    if (aside) window.htmx.ajax("GET", aside.dataset.url, { target: aside, swap: "outerHTML" });
  }

  document.addEventListener("review:discussion", function (event) {
    const detail = event.detail || {};
    refreshPanel();
    if (detail.reconnected) {
      document.querySelectorAll("[data-turn-discussion]").forEach(function (aside) {
        refreshTurn(aside.dataset.turnDiscussion);
      });
    } else if (detail.turn_index !== null && detail.turn_index !== undefined) {
      refreshTurn(detail.turn_index);
    }
  });

  function isPanelPost(event) {
    const config = event.detail && event.detail.requestConfig;
    return Boolean(config && config.verb === "post" && event.detail.target === panel);
  }
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (isPanelPost(event)) { posting += 1; posts += 1; }
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (!isPanelPost(event)) return;
    // htmx has swapped the answer in (the swap comes before afterRequest); a waiting refresh runs now.
    window.setTimeout(function () {
      posting = Math.max(0, posting - 1);
      if (posting === 0 && again && !refreshing) { again = false; refreshPanel(); }
    }, 0);
  });
})();
