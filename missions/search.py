"""The Web search backend the owner chose in Settings, and `web_search`'s query to it.

Two kinds (`SearchBackend.Kind`):
- `searxng`: a SearXNG instance; its JSON API (`/search?q=...&format=json`, which the instance
  must enable) is asked through the run's egress like any page.
- `api`: a search API whose key an egress bridge holds (`cluster.egress.BRIDGES`): the request
  goes to `http://<bridge>.bridge/<the URL's path>?q=...&count=...`, the bridge adds the key,
  so our code, the logs and the model never see it. The API answers JSON with its results in
  `results` (or `web.results`), each with a title, a URL and a snippet (`content`, `snippet` or
  `description`).

The URL is checked as the compatible endpoint's is: http(s), a host, no credentials.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.utils.translation import gettext as _

from missions import endpoints, web_pages
from missions.errors import MissionError
from missions.models import SearchBackend
from tools.base import ToolError

BRIDGE_PATTERN = r"^[a-z][a-z0-9-]{0,30}$"
MAX_RESULTS = 10
TITLE_CHARS = 200
SNIPPET_CHARS = 400
URL_CHARS = 500


@dataclass(frozen=True)
class Backend:
    kind: str
    url: str
    bridge: str = ""


@dataclass(frozen=True)
class Result:
    title: str
    url: str
    snippet: str


def get() -> Backend | None:
    stored = SearchBackend.objects.first()
    return Backend(stored.kind, stored.url, stored.bridge) if stored else None


def clean(*, kind: str, url: str, bridge: str = "") -> Backend:
    """The backend as it will be stored, or a precise `MissionError`."""
    if kind not in SearchBackend.Kind.values:
        raise MissionError(
            _("The search backend is one of: %(kinds)s.")
            % {"kinds": ", ".join(SearchBackend.Kind.values)},
            code="invalid_input",
        )
    try:
        credentials = urlsplit(url.strip())
        named = bool(credentials.username or credentials.password)
    except ValueError:
        named = False  # said below, by the endpoint's check
    if named:
        raise MissionError(
            _("Put no user or password in the URL: a search API's key is added by its bridge."),
            code="invalid_input",
        )
    cleaned = endpoints.clean_url(url)
    bridge = bridge.strip()
    if kind == SearchBackend.Kind.API:
        if not re.fullmatch(BRIDGE_PATTERN, bridge):
            raise MissionError(
                _(
                    "A search API needs the name of the egress bridge holding its key (lowercase"
                    " letters, digits and dashes, starting with a letter)."
                ),
                code="invalid_input",
            )
    elif bridge:
        raise MissionError(
            _("A SearXNG instance is asked directly: it takes no bridge."), code="invalid_input"
        )
    return Backend(kind, cleaned, bridge)


def put(backend: Backend) -> SearchBackend:
    """Store `backend` (cleaned by `clean`) as the one backend; the caller holds a transaction."""
    SearchBackend.objects.exclude(pk=1).delete()
    stored, _created = SearchBackend.objects.update_or_create(
        pk=1, defaults={"kind": backend.kind, "url": backend.url, "bridge": backend.bridge}
    )
    return stored


def delete() -> bool:
    deleted, _by_model = SearchBackend.objects.all().delete()
    return deleted > 0


def host_of(backend: Backend) -> str:
    return urlsplit(backend.url).hostname or ""


# --- the query -----------------------------------------------------------------------------------


def search(run_id: int, query: str, count: int) -> list[Result]:
    """Up to `count` results for `query` from the owner's backend, asked for `run_id`."""
    backend = get()
    if backend is None:
        raise ToolError(
            "No web search backend is set: the owner sets one in Settings → Web search."
        )
    count = max(1, min(count, MAX_RESULTS))
    if backend.kind == SearchBackend.Kind.SEARXNG:
        base = (
            backend.url
            if urlsplit(backend.url).path.endswith("/search")
            else (backend.url + "/search")
        )
        answer = web_pages.get_json(run_id, base, {"q": query, "format": "json"})
    else:
        path = urlsplit(backend.url).path or "/"
        bridged = f"http://{backend.bridge}.bridge{path}"
        answer = web_pages.get_json(
            run_id, bridged, {"q": query, "count": str(count)}, bridge=backend.bridge
        )
    return _results(answer)[:count]


def _results(answer: Any) -> list[Result]:
    listed = answer.get("results") if isinstance(answer, dict) else None
    if listed is None and isinstance(answer, dict) and isinstance(answer.get("web"), dict):
        listed = answer["web"].get("results")
    if not isinstance(listed, list):
        raise ToolError("The search backend's answer has no list of results.")
    results = []
    for item in listed:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            continue
        snippet = next(
            (item[key] for key in ("content", "snippet", "description") if item.get(key)), ""
        )
        results.append(
            Result(
                title=" ".join(str(item.get("title", "")).split())[:TITLE_CHARS],
                url=item["url"][:URL_CHARS],
                snippet=" ".join(str(snippet).split())[:SNIPPET_CHARS],
            )
        )
    return results
