// Reviewing together, live, on every page (base.html): the member's socket ws/review/ (ReviewConsumer in
// webapp/live/consumers.py). A "notifications" event sets the header's unread badge and shows a short note
// ("alice mentioned you on trajectory 12"); a "discussion" event (trajectory pages: the socket joins that
// trajectory too) is re-dispatched as a DOM event `review:discussion` for comments.js, which fetches the
// server-rendered discussion again. Texts go in with textContent only. Events: docs/review.md, "Live".

const REFUSED = new Set([4401, 4403, 4404]);

function setUnread(count) {
  const link = document.querySelector(".notifications-link");
  if (!link) return;
  link.dataset.unread = String(count);
  let badge = link.querySelector(".unread-badge");
  if (count > 0) {
    if (!badge) {
      badge = document.createElement("span");
      badge.className = "badge unread-badge";
      link.insertBefore(badge, link.querySelector(".visually-hidden"));
    }
    badge.textContent = String(count);
  } else if (badge) {
    badge.remove();
  }
  const hidden = link.querySelector(".visually-hidden");
  if (hidden) hidden.textContent = " (" + count + " unread)";
}

function showNote(news) {
  let note = document.querySelector("[data-live-note]");
  if (!note) {
    note = document.createElement("div");
    note.className = "live-note";
    note.dataset.liveNote = "";
    note.setAttribute("role", "status");
    document.body.appendChild(note);
  }
  note.replaceChildren();
  const link = document.createElement("a");
  link.href = news.url;
  link.textContent = news.text;
  note.appendChild(link);
  note.hidden = false;
  window.clearTimeout(showNote.timer);
  showNote.timer = window.setTimeout(() => { note.hidden = true; }, 12_000);
}

function onEvent(event) {
  window.reviewEventsReceived = (window.reviewEventsReceived || 0) + 1;
  if (event.type === "notifications") {
    setUnread(event.unread);
    if (event.new) showNote(event.new);
  } else if (event.type === "discussion") {
    document.dispatchEvent(new CustomEvent("review:discussion", { detail: event }));
  }
}

function connect(attempt) {
  const section = document.querySelector("[data-discussion-trajectory]");
  const query = section ? "?trajectory=" + encodeURIComponent(section.dataset.discussionTrajectory) : "";
  const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
  const socket = new WebSocket(scheme + window.location.host + "/ws/review/" + query);
  socket.addEventListener("message", (message) => {
    let data;
    try { data = JSON.parse(message.data); } catch (error) { return; }
    if (data.type === "ready") {
      attempt = 0;
      window.reviewSocketReady = true;
      document.documentElement.dataset.reviewLive = "ready";
      // Whatever changed while the socket was away: fetch the discussion again.
      if (section && window.reviewSocketConnects > 0) {
        document.dispatchEvent(new CustomEvent("review:discussion", { detail: { turn_index: null, reconnected: true } }));
      }
      window.reviewSocketConnects = (window.reviewSocketConnects || 0) + 1;
    } else if (data.type === "event") {
      onEvent(data.event);
    }
  });
  socket.addEventListener("close", (event) => {
    window.reviewSocketReady = false;
    document.documentElement.dataset.reviewLive = "down";
    if (REFUSED.has(event.code)) return;
    // Back off: 1 s, 2 s … up to 30 s, with jitter.
    const delay = Math.min(30_000, 1000 * 2 ** attempt) * (0.75 + Math.random() * 0.5);
    window.setTimeout(() => connect(attempt + 1), delay);
  });
}

if (document.querySelector(".notifications-link")) connect(0);
