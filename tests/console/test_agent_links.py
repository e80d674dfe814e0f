"""Text an agent or a web page wrote never makes the console load anything or link anywhere: no
URL in a run's answer or a tool's output becomes a live link or an image, and the policy the
console sends lets images come only from the console itself."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.console.factories import launch, work

pytestmark = pytest.mark.django_db

TRAPS = (
    "See https://evil.example/steal?d=SECRET and ![logo](https://evil.example/pixel.png)"
    ' <img src="https://evil.example/i.png"> <a href="https://evil.example/a">here</a>'
    " [click](http://evil.example/b) www.evil.example/c"
)


def test_urls_an_agent_wrote_are_shown_as_text_never_loaded_or_linked(
    owner_client: Client,
) -> None:
    _mission, run = launch(
        [
            {
                "text": TRAPS,
                "tool_calls": [{"name": "web_fetch", "arguments": {"url": TRAPS}}],
            },
            {"text": TRAPS},
        ]
    )
    assert work() == ["done"]

    response = owner_client.get(f"/runs/{run.pk}/")

    content = response.content.decode()
    assert "evil.example/steal" in content  # shown, as text
    for tag in re.findall(r"<(?:a|img|link|script|iframe|source|video|audio)\b[^>]*>", content):
        assert "evil.example" not in tag, tag
    attribute = r"\b(?:src|href|srcset|action|poster)\s*=\s*[\"']?(?:https?:)?//[^\"'\s>]*evil"
    assert re.search(attribute, content) is None
    policy = dict(
        part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";")
    )
    assert policy["img-src"] == "'self' data:"
    assert policy["default-src"] == "'self'"
