// Shared by the live pages (run page, compare): the run-socket client with resume and backoff, the
// status names, the EMA smoothing of curves, and the escaping of text for Plotly labels. One copy, so the
// pages cannot drift. Protocol: docs/live.md.
(function () {
  "use strict";
  const FINAL = ["SUCCEEDED", "FAILED", "CANCELLED", "LOST"];
  const STATUS_NAMES = { QUEUED: "Queued", STARTING: "Starting", RUNNING: "Running", SUCCEEDED: "Succeeded",
    FAILED: "Failed", CANCELLED: "Cancelled", LOST: "Lost" };
  // Close codes the server refuses with: reconnecting would not help.
  const REFUSED = { 4401: "sign in again to follow this run", 4403: "not allowed", 4404: "run not found" };

  // Follow one run's socket. `options`: path (ws path), lastSeq() → the highest seq applied (a reconnect
  // resumes after it), onEvent(event), onSnapshot(message), isFinal() → stop reconnecting, and
  // onState(label, kind) with kind one of ok | down | refused | muted. Returns {close()}.
  //
  // The channel layer is Redis pub/sub, which keeps nothing for a listener that was away (a Redis blip):
  // a live event whose seq skips past the last one applied means events were lost on the way, so it is
  // not applied; the socket reconnects at once from the last applied seq and the server's replay fills
  // the gap. Gaps inside a replay are real (events the trainer never delivered) and so is a gap seen
  // twice: neither reconnects.
  function followRun(options) {
    let attempt = 0;
    let stopped = false;
    let socket = null;
    let replayLeft = 0;        // replayed events still to come on this connection
    let gapResumedAt = null;   // the seq that last made us reconnect
    let reconnectNow = false;

    function connect() {
      const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
      socket = new WebSocket(scheme + window.location.host + options.path + "?last_seq=" + options.lastSeq());
      socket.addEventListener("open", function () {
        attempt = 0;
        window.websocketConnected = true;
        if (options.onState) options.onState("live", "ok");
      });
      socket.addEventListener("message", function (message) {
        let data;
        try { data = JSON.parse(message.data); } catch (error) { return; }
        if (data.type === "event") {
          const seq = data.event.seq, applied = options.lastSeq();
          if (replayLeft > 0) {
            replayLeft -= 1;
          } else if (typeof seq === "number" && typeof applied === "number" && seq > applied + 1 &&
                     seq !== gapResumedAt) {
            gapResumedAt = seq;
            reconnectNow = true;
            window.liveGapsResumed = (window.liveGapsResumed || 0) + 1;
            socket.close();
            return;
          }
          window.liveEventsReceived = (window.liveEventsReceived || 0) + 1;
          options.onEvent(data.event);
        } else if (data.type === "snapshot") {
          replayLeft = (data.replay && data.replay.count) || 0;
          window.liveSnapshotsReceived = (window.liveSnapshotsReceived || 0) + 1;
          if (options.onSnapshot) options.onSnapshot(data);
        }
      });
      socket.addEventListener("close", function (event) {
        window.websocketConnected = false;
        if (stopped) return;
        if (reconnectNow) { reconnectNow = false; connect(); return; }
        if (REFUSED[event.code]) {
          stopped = true;
          if (options.onState) options.onState("not live: " + REFUSED[event.code], "refused");
          return;
        }
        if (options.isFinal && options.isFinal()) {
          if (options.onState) options.onState("run finished", "muted");
          return;
        }
        // Back off: 0.5 s, 1 s, 2 s … up to 30 s, with jitter so a restarted server is not stampeded.
        const delay = Math.min(30000, 500 * Math.pow(2, attempt)) * (0.75 + Math.random() * 0.5);
        attempt += 1;
        if (options.onState) options.onState("reconnecting in " + Math.round(delay / 1000) + " s…", "down");
        window.setTimeout(function () { if (!stopped) connect(); }, delay);
      });
    }

    connect();
    return { close: function () { stopped = true; if (socket) socket.close(); } };
  }

  // Exponential moving average: alpha 0 is the raw curve. `step` continues a smoothed curve by one point.
  function emaStep(last, value, alpha) {
    return last === null || last === undefined || !alpha ? value : alpha * last + (1 - alpha) * value;
  }

  function ema(values, alpha) {
    const out = new Array(values.length);
    let last = null;
    for (let i = 0; i < values.length; i++) {
      last = emaStep(last, values[i], alpha);
      out[i] = last;
    }
    return out;
  }

  // Plotly renders a subset of HTML in every label it draws (titles, legends, hover, axis titles): <a href>,
  // <b>, <br>, <span style>… A metric key or run name is data, never markup, so each one goes through
  // this before it reaches Plotly: its entity decoding turns the escapes back into the same characters,
  // shown as text.
  const PLOT_ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;" };  // the entities Plotly decodes
  function plotText(value) {
    return String(value === null || value === undefined ? "" : value).replace(/[&<>"']/g, function (c) {
      return PLOT_ESCAPES[c];
    });
  }

  window.RolloutLive = { FINAL: FINAL, STATUS_NAMES: STATUS_NAMES, followRun: followRun, ema: ema, emaStep: emaStep,
    plotText: plotText };
})();
