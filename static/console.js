// agentos console: live event stream + service worker registration.
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
    // htmx.trigger is what the brief's hx-trigger="agentos:X from:body" listens to;
    // a plain CustomEvent is the same thing if htmx failed to load.
    const name = "agentos:" + type;
    if (window.htmx && typeof window.htmx.trigger === "function") {
      window.htmx.trigger(body, name, detail);
    } else {
      body.dispatchEvent(new CustomEvent(name, { bubbles: true, detail }));
    }
  }

  function onMessage(event) {
    let msg;
    try {
      msg = JSON.parse(event.data);
    } catch {
      return; // malformed JSON: ignore
    }
    if (!msg || typeof msg !== "object" || Array.isArray(msg)) return;
    if (typeof msg.type !== "string" || !TYPE_RE.test(msg.type)) return;
    try {
      emit(msg.type, msg);
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
      socket.addEventListener("message", onMessage);
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
