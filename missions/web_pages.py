"""Fetching a page from the Web for a run (docs/design.md §14, §19): on the control plane, in the
worker running the run's step, through the egress proxy (`cluster.outbound`), which decides every
host by the run's policy and journals `egress.allowed` / `egress.refused`. Nothing fetched is
executed or interpreted: HTML becomes text with the standard library's tokenizer, scripts and
styles dropped, links and images reduced to their text.

Bounds: http and https only, a URL of at most `MAX_URL` characters without credentials, at most
`MAX_BYTES` read, `SECONDS` per request, `MAX_REDIRECTS` redirects (each through the proxy, so
each hop's host is decided again), and the content types in `TYPES`. Every refusal is a
`ToolError` saying exactly what was refused.

The reader (`missions.web_reader`) takes a `Page` and does not care how it was made: a real
browser in a virtual machine can be another `Fetcher`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from cluster import outbound
from tools.base import ToolError

MAX_URL = 2000
MAX_BYTES = 2_000_000
MAX_TEXT = 200_000  # characters of a page's text the reader is given
SECONDS = 20
MAX_REDIRECTS = 5
TYPES = ("text/html", "text/plain", "application/json")
REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class Page:
    """What the reader reads: where it was asked for and where it ended up, its type, its text
    (HTML already made text) and its title ("" when it has none)."""

    url: str
    final_url: str
    content_type: str
    text: str
    title: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


# (run id, URL) -> Page, or a ToolError saying why not.
Fetcher = Callable[[int, str], Page]


def check_url(url: str) -> str:
    """`url` if a web tool may ask for it, else a precise `ToolError`."""
    url = url.strip()
    if not url:
        raise ToolError("The URL is empty.")
    if len(url) > MAX_URL:
        raise ToolError(f"The URL has {len(url)} characters; at most {MAX_URL}.")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises on a port that is not a number
    except ValueError as error:
        raise ToolError(f"{url!r} is not a URL: {error}.") from None
    if parts.scheme not in ("http", "https"):
        raise ToolError(f"Only http:// and https:// URLs are fetched; {url!r} is not one.")
    if not parts.hostname:
        raise ToolError(f"{url!r} names no host.")
    if parts.username or parts.password:
        raise ToolError("A URL with credentials in it is not fetched.")
    return url


def fetch(run_id: int, url: str) -> Page:
    """The page at `url`, fetched for `run_id` through its egress."""
    body, final, content_type, charset = get(run_id, url, types=TYPES)
    decoded = body.decode(charset or "utf-8", errors="replace")
    if content_type == "text/html":
        text, title = html_text(decoded)
    else:
        text, title = decoded, ""
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + f"\n[... cut: the page's text is longer than {MAX_TEXT} ...]"
    return Page(url=url, final_url=final, content_type=content_type, text=text, title=title)


def get_json(run_id: int, url: str, params: dict[str, str], *, bridge: str = "") -> Any:
    """A JSON answer of `url` (a search backend's), fetched like a page; through `bridge`
    (its name) when the URL is a bridge's."""
    full = str(httpx.URL(url, params=params))
    scopes = ["egress", f"bridge:{bridge}"] if bridge else None
    body, _final, _type, charset = get(run_id, full, types=("application/json",), scopes=scopes)
    try:
        return json.loads(body.decode(charset or "utf-8", errors="replace"))
    except json.JSONDecodeError as error:
        raise ToolError(f"The search backend did not answer JSON: {error}.") from None


def get(
    run_id: int, url: str, *, types: tuple[str, ...], scopes: list[str] | None = None
) -> tuple[bytes, str, str, str]:
    """(body, final URL, content type, charset) of a GET of `url`, redirects followed."""
    current = check_url(url)
    try:
        http = outbound.client(run_id, seconds=SECONDS, scopes=scopes)
    except outbound.Unavailable as error:
        raise ToolError(f"The Web cannot be reached now: {error}.") from None
    except ValueError as error:  # a bridge the egress tokens do not know
        raise ToolError(f"The Web cannot be reached this way: {error}.") from None
    with http:
        for _hop in range(MAX_REDIRECTS + 1):
            try:
                with http.stream("GET", current) as response:
                    if response.status_code in REDIRECTS and "location" in response.headers:
                        current = check_url(urljoin(current, response.headers["location"]))
                        continue
                    return _body(response, current, types)
            except httpx.ProxyError as error:
                raise ToolError(
                    f"{_host(current)} was refused by the egress policy: {error}."
                ) from None
            except httpx.TimeoutException:
                raise ToolError(f"{current} did not answer within {SECONDS} seconds.") from None
            except httpx.HTTPError as error:
                raise ToolError(f"{current} could not be fetched: {error}.") from None
    raise ToolError(f"{url} redirects more than {MAX_REDIRECTS} times; not followed further.")


def _body(
    response: httpx.Response, url: str, types: tuple[str, ...]
) -> tuple[bytes, str, str, str]:
    if response.status_code == 403:
        said = response.read()[:2000].decode(errors="replace").strip()
        # The egress proxy's own refusal of a plain-HTTP destination (`cluster.egress`): a site
        # that imitates it only gets its own 403 reported as a refusal.
        if said.startswith(f"{_host(url)} is not allowed"):
            raise ToolError(f"{_host(url)} was refused by the egress policy: {said}")
    if not 200 <= response.status_code < 300:
        raise ToolError(f"{url} answered HTTP {response.status_code}.")
    media, _, params = response.headers.get("content-type", "").partition(";")
    media = media.strip().lower()
    if media not in types:
        named = media or "none"
        raise ToolError(
            f"{url} is {named}; only {', '.join(types)} are read (content type refused)."
        )
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BYTES:
        raise ToolError(f"{url} is {int(declared)} bytes; at most {MAX_BYTES} bytes are read.")
    body = bytearray()
    # httpx's timeout bounds each read; a page sent a byte at a time is bounded here.
    deadline = time.monotonic() + SECONDS
    for chunk in response.iter_bytes():
        body += chunk
        if time.monotonic() > deadline:
            raise ToolError(f"{url} took more than {SECONDS} seconds to send; not read further.")
        if len(body) > MAX_BYTES:
            raise ToolError(
                f"{url} is more than {MAX_BYTES} bytes; at most {MAX_BYTES} bytes are read."
            )
    charset = re.search(r"charset=\"?([A-Za-z0-9._-]+)", params)
    name = charset.group(1) if charset else ""
    try:
        b"".decode(name or "utf-8")
    except LookupError:
        name = ""  # an unknown charset: read as UTF-8, undecodable bytes replaced
    return bytes(body), str(response.url), media, name


def _host(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


# --- HTML to text --------------------------------------------------------------------------------

# Their content is not text a reader reads (code, styling, vector data, embedded documents).
_SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "math", "iframe", "object"})
_BLOCKS = frozenset(
    {
        "p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header",
        "footer", "nav", "aside", "main", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
        "blockquote", "dd", "dt", "dl", "figure", "figcaption", "hr", "form", "fieldset",
    }
)  # fmt: skip


class _Text(HTMLParser):
    """Text and title of an HTML document: the tokenizer only, nothing run, nothing fetched."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self.skipping = 0
        self.in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self.skipping += 1
        elif tag == "title":
            self.in_title = True
        elif tag in _BLOCKS:
            self.parts.append("\n")
        elif tag == "img":
            alt = dict(attrs).get("alt")
            if alt and not self.skipping:
                self.parts.append(f" {alt} ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self.skipping = max(0, self.skipping - 1)
        elif tag == "title":
            self.in_title = False
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self.skipping:
            return
        (self.title if self.in_title else self.parts).append(data)


def html_text(html: str) -> tuple[str, str]:
    """(text, title) of an HTML document, whitespace collapsed, paragraphs kept."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return text, " ".join("".join(parser.title).split())
