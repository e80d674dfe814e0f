"""What the control plane makes of the browser guest's answer (`cluster.browser`): data, read
strictly, whatever the guest (a page may have taken it over) printed. The browser itself runs in
tests/missions/test_web_browser.py, in a real VM."""

from __future__ import annotations

import json

import pytest

from cluster import browser
from cluster.sandbox import Result


def answered(output: str, **given: object) -> Result:
    fields: dict[str, object] = {
        "exit_code": 0,
        "output": output,
        "truncated_bytes": 0,
        "timed_out": False,
        "cancelled": False,
        "duration_ms": 1234,
    }
    return Result(**{**fields, **given})  # type: ignore[arg-type]  # test values by name


def test_it_reads_the_guest_s_page() -> None:
    said = {
        "status": 200,
        "note": "",
        "final_url": "https://example.org/after",
        "title": "T",
        "html": "<p>x</p>",
        "cut": False,
        "seconds": 3.5,
    }
    page = browser._page("https://example.org/", answered(json.dumps(said)))
    assert page == browser.RenderedPage(
        url="https://example.org/",
        final_url="https://example.org/after",
        html="<p>x</p>",
        title="T",
        status=200,
        cut=False,
        note="",
        seconds=3.5,
    )


@pytest.mark.parametrize(
    ("result", "said"),
    [
        (answered("", timed_out=True, exit_code=None), r"did not finish \(timed out, 1234 ms\)"),
        (answered("", cancelled=True, exit_code=None), r"did not finish \(stopped"),
        (answered("{}", truncated_bytes=5), "said more than"),
        (answered("not json", exit_code=1), r"ended \(exit code 1\) without a page"),
        (answered("[1, 2]"), r"ended \(exit code 0\) without a page"),
        (answered(json.dumps({"error": "x could not be loaded: net::ERR"})), "could not be"),
        (answered(json.dumps({"status": 200})), "the browser gave no page"),
    ],
)
def test_it_refuses_what_is_not_a_page_precisely(result: Result, said: str) -> None:
    with pytest.raises(browser.BrowserError, match=said):
        browser._page("https://example.org/", result)


def test_fields_of_the_wrong_type_are_not_believed() -> None:
    said = {"html": "<p>x</p>", "status": "200", "seconds": "soon", "final_url": 7, "title": None}
    page = browser._page("https://example.org/", answered(json.dumps(said)))
    assert (page.status, page.seconds, page.title) == (None, 0.0, "")
    assert page.final_url == "7"  # a string; missions.web_browser keeps it only if a URL


def test_the_kept_chromium_s_pid_is_believed_only_as_a_number() -> None:
    said = {"html": "<p>x</p>", "browser_pid": 112, "fresh": False}
    page = browser._page("https://example.org/", answered(json.dumps(said)), "boot-1")
    assert (page.boot_id, page.browser_pid, page.fresh) == ("boot-1", 112, False)
    said = {"html": "<p>x</p>", "browser_pid": True, "fresh": "no"}
    page = browser._page("https://example.org/", answered(json.dumps(said)))
    assert (page.boot_id, page.browser_pid, page.fresh) == ("", None, True)
