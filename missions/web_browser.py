"""`web_fetch` with `render`: the page as a real browser leaves it, for pages whose text their
scripts write (docs/design.md §13, §19). Chromium runs in the run's level-2 virtual machine
(`cluster.browser`), reaching out only through the run's egress; what it gives back becomes a
`Page` like a fetched one (its HTML made text by the same tokenizer), so it goes to the
quarantined reader (`missions.web_reader`) the same way, as the Web's data.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from cluster import browser
from kernel.context import StepCall
from missions import web_pages
from missions.web_pages import Page
from tools import shell
from tools.base import ToolError

# (the journaled step asking, URL) -> Page, or a ToolError saying why not.
Renderer = Callable[[StepCall, str], Page]


def fetch(call: StepCall, url: str) -> Page:
    """The page at `url` rendered for the run of `call`, as part of that step: stopped with it,
    and answered again, not rendered twice, by a node that already rendered it."""
    try:
        rendered = browser.render(
            url, run_id=call.run_id, step=shell.step_ref(call), stopping=call.stopping
        )
    except browser.BrowserError as error:
        raise ToolError(f"The browser could not read {url}: {error}.") from None
    text, title = web_pages.html_text(rendered.html)
    try:
        # The guest's word for where the page ended up: kept only if it is a URL we would fetch.
        final_url = web_pages.check_url(rendered.final_url)
    except ToolError:
        final_url = url
    status = rendered.status
    if status == 403 and text.startswith(f"{_host(final_url)} is not allowed"):
        # The egress proxy's own refusal of a plain-HTTP destination, as `web_pages` reads it.
        raise ToolError(f"{_host(final_url)} was refused by the egress policy: {text}")
    if status is not None and not 200 <= status < 300:
        raise ToolError(f"{final_url} answered HTTP {status}.")
    if rendered.cut:
        text += f"\n[... cut: the page's HTML is longer than {browser.MAX_CHARS} characters ...]"
    if len(text) > web_pages.MAX_TEXT:
        text = text[: web_pages.MAX_TEXT]
        text += f"\n[... cut: the page's text is longer than {web_pages.MAX_TEXT} ...]"
    if rendered.note:
        text += f"\n[{rendered.note}]"
    return Page(
        url=url,
        final_url=final_url,
        content_type="text/html",
        text=text,
        title=rendered.title or title,
    )


def _host(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
