// agentos console: live event stream + service worker registration.
// Server messages: `hello` (then we send `resume`), doorbells (`{"type": "<what changed>"}`,
// turned into `agentos:<what changed>` DOM events), stream events (`agentos:run-<id>`,
// `agentos:mission-<id>`, `agentos:runs`), model deltas (`agentos:delta-<run>`, and the text
// appended to `[data-delta-for="<run>"]`) and the steps of the runs the page watches
// (`[data-watch-run="<run>"]`: swapped into its timeline as the server rendered them; such a
// page is sent only its runs' events, and now and then where the stream is). Pages also poll
// slowly, so they work without it.
// Loaded with <script src defer> (strict CSP, no inline code), so the DOM is parsed when this runs.
// Everything is inside one IIFE so the page gets no new globals.
(() => {
  "use strict";

  const MIN_DELAY_MS = 1000;
  const MAX_DELAY_MS = 30000;
  // A connection that stayed up this long counts as healthy, so the backoff starts over.
  // (Resetting on "open" alone would hammer a server that accepts and then drops us at once.)
  const STABLE_MS = 10000;
  // Event names end up in hx-trigger attributes; refuse anything that could not be written there.
  const TYPE_RE = /^[A-Za-z0-9_.:-]{1,64}$/;

  const body = document.body;
  const wsPath = body && body.dataset.wsUrl;

  let live = false;

  function setLive(on) {
    live = on;
    for (const dot of document.querySelectorAll(".live-dot")) dot.classList.toggle("is-live", on);
  }

  function emit(type, detail) {
    // htmx.trigger is what the pages' hx-trigger="agentos:X from:body" listens to;
    // a plain CustomEvent is the same thing if htmx failed to load.
    const name = "agentos:" + type;
    if (window.htmx && typeof window.htmx.trigger === "function") {
      window.htmx.trigger(body, name, detail);
    } else {
      body.dispatchEvent(new CustomEvent(name, { bubbles: true, detail }));
    }
  }

  // The number of the last stream event received: a reconnect resumes right after it, so the
  // server replays what was missed meanwhile (null: none yet, start at the current head).
  let lastNumber = null;

  function isId(value) {
    return Number.isSafeInteger(value) && value > 0;
  }

  function resume(socket) {
    const after = lastNumber === null ? "now" : lastNumber;
    try {
      socket.send(JSON.stringify({ type: "resume", after }));
    } catch {
      // Closed meanwhile: the reconnect sends it again.
    }
  }

  // A stream event names what changed: pages listen for their run, their mission, or any run.
  function onEvent(msg) {
    if (typeof msg.number === "number") {
      if (lastNumber !== null && msg.number <= lastNumber) return; // seen already
      lastNumber = msg.number;
    }
    const kind = typeof msg.kind === "string" ? msg.kind : "";
    if (isId(msg.run)) emit("run-" + msg.run, msg);
    if (isId(msg.mission)) emit("mission-" + msg.mission, msg);
    if (kind.startsWith("run.") || kind.startsWith("step.")) emit("runs", msg);
  }

  // Model output while a step runs: appended as text (never markup) to the elements that show
  // that run's step under way, using `offset` to drop repeats and to mark a missed beginning.
  function onDelta(msg) {
    if (!isId(msg.run) || typeof msg.text !== "string") return;
    const channel = msg.channel === "reasoning" ? "reasoning" : "text";
    for (const el of document.querySelectorAll('[data-delta-for="' + msg.run + '"]')) {
      if ((el.dataset.deltaChannel || "text") !== channel) continue;
      if (el.dataset.deltaSeq && isId(msg.seq) && el.dataset.deltaSeq !== String(msg.seq)) continue;
      appendDelta(el, msg);
    }
    emit("delta-" + msg.run, { text: msg.text, seq: msg.seq, channel, offset: msg.offset });
  }

  function appendDelta(el, msg) {
    const shown = Number(el.dataset.deltaLength || "0");
    let text = msg.text;
    if (Number.isSafeInteger(msg.offset) && msg.offset >= 0) {
      const end = msg.offset + text.length;
      if (end <= shown) return;
      if (msg.offset < shown) text = text.slice(shown - msg.offset);
      else if (msg.offset > shown) text = (shown === 0 ? "\u2026 " : " \u2026 ") + text; // a gap
      el.dataset.deltaLength = String(end);
    } else {
      el.dataset.deltaLength = String(shown + text.length);
    }
    el.append(document.createTextNode(text));
  }

  // Steps of the runs this page shows, rendered by the server (`step` messages) and swapped in
  // at once. The newest state of each is kept until a refresh of the timeline shows it: a refresh
  // rendered before it (its request crossed the message) must not take a step back.
  const pushed = new Map(); // "run:seq" -> {run, seq, html, done}
  const MAX_PUSHED = 500;

  function watchedRuns() {
    const ids = [];
    for (const el of document.querySelectorAll("[data-watch-run]")) {
      const id = Number(el.dataset.watchRun);
      if (isId(id) && !ids.includes(id)) ids.push(id);
    }
    return ids;
  }

  function watch(socket) {
    const runs = watchedRuns();
    if (!runs.length) return;
    try {
      socket.send(JSON.stringify({ type: "watch", runs }));
    } catch {
      // Closed meanwhile: the reconnect sends it again.
    }
  }

  function isOpen(li) {
    return li.classList.contains("step-open");
  }

  function swapStep(card, entry) {
    const swap = (target, style) =>
      window.htmx.swap(target, entry.html, { swapStyle: style, swapDelay: 0, settleDelay: 0 });
    const current = card.querySelector("#step-" + entry.seq);
    if (current) {
      swap(current, "outerHTML");
      return;
    }
    let list = card.querySelector("ol.timeline");
    if (!list) {
      list = document.createElement("ol");
      list.className = "timeline";
      const empty = card.querySelector(".empty");
      if (empty) empty.replaceWith(list);
      else card.append(list);
    }
    // In seq order: a step may be shown before an older one's result.
    const later = Array.from(list.children).find((li) => Number(li.dataset.seq) > entry.seq);
    if (later) swap(later, "beforebegin");
    else swap(list, "beforeend");
  }

  function onStep(msg) {
    if (!isId(msg.run) || !isId(msg.seq) || typeof msg.html !== "string") return;
    if (!window.htmx || typeof window.htmx.swap !== "function") return; // the refresh shows it
    const card = document.querySelector('[data-watch-run="' + msg.run + '"]');
    if (!card) return;
    const probe = document.createElement("template");
    probe.innerHTML = msg.html;
    const li = probe.content.firstElementChild;
    if (!li) return;
    const entry = { run: msg.run, seq: msg.seq, html: msg.html, done: !isOpen(li) };
    const current = card.querySelector("#step-" + msg.seq);
    if (current && !isOpen(current) && !entry.done) return; // never back to under way
    const key = msg.run + ":" + msg.seq;
    pushed.delete(key);
    pushed.set(key, entry);
    if (pushed.size > MAX_PUSHED) pushed.delete(pushed.keys().next().value);
    swapStep(card, entry);
  }

  // A refreshed timeline: put back what the socket brought after it was rendered.
  function reapply(card) {
    const run = Number(card.dataset.watchRun);
    for (const [key, entry] of pushed) {
      if (entry.run !== run) continue;
      const current = card.querySelector("#step-" + entry.seq);
      if (current && !isOpen(current)) {
        pushed.delete(key); // shown done by the refresh itself: nothing left to guard
      } else if (!current || entry.done) {
        swapStep(card, entry);
      }
    }
  }

  document.addEventListener("htmx:load", (event) => {
    const card = event.target;
    if (card instanceof Element && card.dataset.watchRun) reapply(card);
  });

  function onMessage(socket, event) {
    let msg;
    try {
      msg = JSON.parse(event.data);
    } catch {
      return; // malformed JSON: ignore
    }
    if (!msg || typeof msg !== "object" || Array.isArray(msg)) return;
    if (typeof msg.type !== "string" || !TYPE_RE.test(msg.type)) return;
    try {
      if (msg.type === "hello") {
        resume(socket);
        watch(socket);
      } else if (msg.type === "event") {
        onEvent(msg);
      } else if (msg.type === "step") {
        onStep(msg);
      } else if (msg.type === "cursor") {
        // A page that watches runs is sent only their events: where the stream is, all the same.
        if (Number.isSafeInteger(msg.number) && (lastNumber === null || msg.number > lastNumber)) {
          lastNumber = msg.number;
        }
      } else if (msg.type === "delta") {
        onDelta(msg);
      } else if (msg.type === "error") {
        // Our cursor comes from another database (restored, reset): start again at its head.
        if (msg.code === "cursor_ahead") {
          lastNumber = null;
          resume(socket);
        }
      } else if (msg.type === "doorbell") {
        if (typeof msg.kind === "string" && TYPE_RE.test(msg.kind)) emit(msg.kind, msg);
      } else {
        emit(msg.type, msg); // a doorbell: {"type": "<what changed>"}
      }
    } catch (err) {
      // A failing listener must not kill the socket handler for later messages.
      console.error("agentos: handler for", msg.type, "failed", err);
    }
  }

  function socketUrl(path) {
    // Always the page's own host; the scheme follows the page so https pages use wss.
    const u = new URL(path, window.location.href);
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    return scheme + "//" + window.location.host + u.pathname + u.search;
  }

  function connectLive(path) {
    const url = socketUrl(path);
    let attempt = 0;
    let timer = null;
    let socket = null;
    let everConnected = false;

    function schedule() {
      if (timer !== null) return;
      // Capped exponential backoff with "equal jitter" (half fixed, half random) so many tabs
      // or clients don't reconnect in lockstep after a server restart.
      const base = Math.min(MAX_DELAY_MS, MIN_DELAY_MS * 2 ** attempt);
      const delay = base / 2 + Math.random() * (base / 2);
      attempt += 1;
      timer = window.setTimeout(() => {
        timer = null;
        open();
      }, delay);
    }

    function open() {
      let openedAt = 0;
      try {
        socket = new WebSocket(url);
      } catch {
        schedule(); // e.g. blocked by CSP connect-src or bad URL; keep trying slowly
        return;
      }
      socket.addEventListener("open", () => {
        openedAt = Date.now();
        setLive(true);
        // After a reconnect we may have missed events; let templates refresh if they want to.
        if (everConnected) emit("reconnected", { type: "reconnected" });
        everConnected = true;
      });
      const opened = socket;
      socket.addEventListener("message", (event) => onMessage(opened, event));
      socket.addEventListener("close", () => {
        socket = null;
        setLive(false);
        if (openedAt && Date.now() - openedAt >= STABLE_MS) attempt = 0;
        schedule();
      });
      // "error" is always followed by "close", which does the reconnecting.
    }

    // Coming back online: don't sit out the rest of a long backoff.
    window.addEventListener("online", () => {
      if (socket === null && timer !== null) {
        window.clearTimeout(timer);
        timer = null;
        attempt = 0;
        open();
      }
    });

    open();
  }

  if (wsPath && "WebSocket" in window) {
    // htmx swaps can bring in new .live-dot elements; give them the current state.
    document.addEventListener("htmx:load", () => setLive(live));
    connectLive(wsPath);
  }

  // Settings' notifications panel: subscribe this device with the server's public key, post
  // the subscription, or unsubscribe. Texts are in the page (translated); this only shows them.
  const pushPanel = document.querySelector("[data-push]");

  function pushKey(base64url) {
    const padded = (base64url + "===".slice((base64url.length + 3) % 4))
      .replace(/-/g, "+")
      .replace(/_/g, "/");
    return Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
  }

  function csrfToken() {
    try {
      return JSON.parse(body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || "";
    } catch {
      return "";
    }
  }

  function postJson(url, data) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify(data),
    });
  }

  function setupPush(panel) {
    const state = panel.querySelector("[data-push-state]");
    const on = panel.querySelector("[data-push-subscribe]");
    const off = panel.querySelector("[data-push-unsubscribe]");
    function show(name) {
      for (const p of panel.querySelectorAll("[data-push-text]")) p.hidden = true;
      const text = panel.querySelector('[data-push-text="' + name + '"]');
      if (state && text) state.textContent = text.textContent;
      panel.dataset.pushStatus = name;
      on.hidden = !(name === "off" || name === "failed");
      off.hidden = name !== "on";
    }
    if (!("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) {
      show("unsupported");
      return;
    }
    if (Notification.permission === "denied") {
      show("denied");
      return;
    }
    const ready = navigator.serviceWorker.ready;
    ready
      .then((reg) => reg.pushManager.getSubscription())
      .then((sub) => show(sub ? "on" : "off"))
      .catch(() => show("off"));
    on.addEventListener("click", async () => {
      on.disabled = true;
      try {
        if ((await Notification.requestPermission()) !== "granted") {
          show("denied");
          return;
        }
        const reg = await ready;
        const sub = await reg.pushManager.subscribe({
          userVisibleOnly: true,
          applicationServerKey: pushKey(panel.dataset.publicKey || ""),
        });
        const answer = await postJson(panel.dataset.subscribeUrl, sub.toJSON());
        if (!answer.ok) throw new Error("subscription refused: " + answer.status);
        show("on");
        window.location.reload(); // the list of devices and the test button
      } catch (err) {
        console.error("agentos: notifications", err);
        show("failed");
      } finally {
        on.disabled = false;
      }
    });
    off.addEventListener("click", async () => {
      off.disabled = true;
      try {
        const reg = await ready;
        const sub = await reg.pushManager.getSubscription();
        if (sub) {
          await postJson(panel.dataset.unsubscribeUrl, { endpoint: sub.endpoint });
          await sub.unsubscribe();
        }
        show("off");
        window.location.reload();
      } catch (err) {
        console.error("agentos: notifications", err);
      } finally {
        off.disabled = false;
      }
    });
  }

  if (pushPanel) setupPush(pushPanel);

  if ("serviceWorker" in navigator) {
    // Register after "load" so the worker's precache doesn't compete with the first page's own fetches.
    const register = () => {
      navigator.serviceWorker.register("/sw.js", { scope: "/" }).catch(() => {
        // Not fatal: the console works without offline support (e.g. plain http on a LAN IP).
      });
    };
    if (document.readyState === "complete") register();
    else window.addEventListener("load", register, { once: true });
  }
})();
