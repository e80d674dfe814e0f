// agentos service worker. Served by a Django view at /sw.js so its scope is the whole site.
// Goals: an offline page for navigations, fast static assets; never cache API/auth/admin data.
"use strict";

// Bump these to drop every cached copy on the next activation.
const SHELL_CACHE = "agentos-shell-v3";
const STATIC_CACHE = "agentos-static-v3"; // runtime cache: hashed /static/ names only known at run time
const STATIC_MAX_ENTRIES = 80; // old hashed files pile up after each deploy; keep the newest N
const OFFLINE_URL = "/offline/";

const PRECACHE = [
  OFFLINE_URL,
  "/static/console.css",
  "/static/console.js",
  "/static/console-extras.js",
  "/static/vendor/htmx.min.js",
  "/static/icons/icon-192.png",
];

// Never intercepted at all: live data, sockets, the admin.
const BYPASS_PREFIXES = ["/api/", "/ws/", "/admin/"];

self.addEventListener("install", (event) => {
  event.waitUntil(
    (async () => {
      const cache = await caches.open(SHELL_CACHE);
      // One failing URL (e.g. an unhashed name the manifest storage no longer serves)
      // must not abort the whole install, so each add is settled on its own.
      await Promise.allSettled(
        PRECACHE.map((url) => cache.add(new Request(url, { cache: "reload" }))),
      );
      await self.skipWaiting();
    })(),
  );
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    (async () => {
      const keep = new Set([SHELL_CACHE, STATIC_CACHE]);
      const names = await caches.keys();
      await Promise.all(
        names.filter((n) => n.startsWith("agentos-") && !keep.has(n)).map((n) => caches.delete(n)),
      );
      // Navigation preload lets the network request start while the worker boots.
      if (self.registration.navigationPreload) {
        try {
          await self.registration.navigationPreload.enable();
        } catch {
          // optional optimisation
        }
      }
      await self.clients.claim();
    })(),
  );
});

self.addEventListener("fetch", (event) => {
  const req = event.request;
  if (req.method !== "GET") return;
  const url = new URL(req.url);
  if (url.origin !== self.location.origin) return;
  if (BYPASS_PREFIXES.some((p) => url.pathname.startsWith(p))) return;

  if (req.mode === "navigate") {
    event.respondWith(networkFirstPage(event));
  } else if (url.pathname.startsWith("/static/")) {
    event.respondWith(cacheFirstStatic(event));
  }
  // Anything else (htmx partials, /sw.js, ...) goes straight to the network untouched.
});

// Pages are per-user and live, so they are never stored; the cache is only the offline fallback.
async function networkFirstPage(event) {
  try {
    const preloaded = await event.preloadResponse;
    if (preloaded) return preloaded;
    return await fetch(event.request);
  } catch {
    const offline = await caches.match(OFFLINE_URL, { cacheName: SHELL_CACHE });
    if (offline) return cleanRedirect(offline);
    return Response.error();
  }
}

async function cacheFirstStatic(event) {
  const req = event.request;
  const cached = await caches.match(req);
  if (cached) return cached;
  const response = await fetch(req);
  // Only whole, same-origin successes are worth keeping (not 404s, not partial Range replies).
  if (response.status === 200 && response.type === "basic") {
    const copy = response.clone();
    event.waitUntil(
      (async () => {
        const cache = await caches.open(STATIC_CACHE);
        await cache.put(req, copy);
        await trim(cache, STATIC_MAX_ENTRIES);
      })().catch(() => {}), // quota errors etc. only cost us a cache miss later
    );
  }
  return response;
}

async function trim(cache, max) {
  const keys = await cache.keys(); // insertion order: oldest first
  for (let i = 0; i < keys.length - max; i += 1) await cache.delete(keys[i]);
}

// Browsers refuse a response marked "redirected" as the answer to a navigation;
// if /offline/ was reached through a redirect when precached, hand back a fresh copy.
async function cleanRedirect(response) {
  if (!response.redirected) return response;
  const body = await response.blob();
  return new Response(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
}

// Web Push: the server says what waits for the owner ({title, body, url, tag}); a tap opens its
// page, in a console window already open if there is one.
self.addEventListener("push", (event) => {
  let data = {};
  try {
    data = event.data ? event.data.json() : {};
  } catch {
    data = {};
  }
  const title = typeof data.title === "string" && data.title ? data.title : "agentos";
  event.waitUntil(
    self.registration.showNotification(title, {
      body: typeof data.body === "string" ? data.body : "",
      tag: typeof data.tag === "string" ? data.tag : undefined,
      icon: "/static/icons/icon-192.png",
      badge: "/static/icons/icon-192.png",
      data: { url: sameOriginPath(data.url) },
    }),
  );
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const url = new URL(sameOriginPath(event.notification.data && event.notification.data.url), self.location.origin).href;
  event.waitUntil(
    (async () => {
      const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
      for (const client of windows) {
        if (new URL(client.url).origin === self.location.origin && "navigate" in client) {
          await client.focus();
          return client.navigate(url);
        }
      }
      return self.clients.openWindow(url);
    })(),
  );
});

// Only a path of this site: a payload never sends the owner elsewhere.
function sameOriginPath(value) {
  if (typeof value !== "string" || !value.startsWith("/") || value.startsWith("//")) return "/";
  return value;
}
