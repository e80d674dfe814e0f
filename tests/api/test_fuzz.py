"""Fuzz /api/v1 from its own OpenAPI schema (schemathesis): no request gets a server error, and
answers documented in the schema match it. Then, for every operation of the schema, what it
cannot describe: no token (401), a body over the limit (413), a method the path lacks (405).

The schema is loaded from the app itself, through Django's WSGI handler, in the test's
transaction; a database with one of everything (project, mission, runs with steps, artifact,
approval, question, schedule, memory note) gives the generated requests ids that exist, half of
the time.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest_django.fixtures import Settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from agentos.core import audit, tokens
from kernel import heartbeats, runs
from memory import store
from memory.store import Draft
from missions import schedules
from tests.api.factories import add_steps, end_run, make_artifact, make_mission, make_project
from tests.approvals.factories import make_approval, make_question
from tests.factories import Owner

# Per operation; raise it for a deeper local run (AGENTOS_FUZZ_EXAMPLES=500 make test).
EXAMPLES = int(os.environ.get("AGENTOS_FUZZ_EXAMPLES", "20"))


@dataclass
class Target:
    schema: Any  # schemathesis' OpenApiSchema, bound to the WSGI app
    secret: str  # a bearer token of the owner
    known: dict[str, list[Any]]  # existing values of path parameters (and project_id)

    def known_or(self, name: str, value: Any) -> Any:
        """Half of the generated values (chosen by their own hash, so a failure replays)
        become one that exists; the rest stay as generated, mostly unknown or invalid."""
        choices = self.known.get(name)
        digest = zlib.crc32(repr(value).encode())
        if not choices or digest % 2:
            return value
        return choices[digest // 2 % len(choices)]


@pytest.fixture
def wsgi_app() -> Iterator[WSGIHandler]:
    """Django's WSGI handler, without closing the connection around each request (it holds the
    test's transaction): the same precaution as Django's test client."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield WSGIHandler()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def target(
    owner: Owner,
    wsgi_app: WSGIHandler,
    seeded_catalog: None,
    monkeypatch: pytest.MonkeyPatch,
    settings: Settings,
    tmp_path: Path,
) -> Target:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")  # missions are created, never executed
    # Memory repositories of this test only: the database is rolled back, they must go too.
    settings.MEMORY_DIR = tmp_path / "memory"
    store.write("project/7", [Draft("CI runs on Jenkins", "ci-main")], author="run:1", message="x")
    heartbeats.record_beat(worker="fuzz:1", started=True)  # a healthy stack: /health answers 200
    project = make_project()
    mission, run = make_mission(project=project)
    add_steps(run, 3, unfinished=1)
    child = runs.start_run(account=mission, program="agent", input={}, parent=run)
    finished_mission, finished = make_mission("Finished already", project=project)
    add_steps(finished, 2)
    end_run(finished)
    artifact = make_artifact(run, b"# Notes\n", name="NOTES.md", media_type="text/markdown")
    approval = make_approval()
    question = make_question()
    schedule = schedules.create_schedule(
        name="weekly",
        mission={"project_id": project.pk, "goal": "Update the notes."},
        cron="0 7 * * 1",
        actor=audit.Actor.command("test"),
    )
    return Target(
        schema=schemathesis.openapi.from_wsgi("/api/v1/openapi.json", wsgi_app),
        # Every scope: the fuzzer reaches each operation's body, the owner's decisions' too.
        secret=tokens.create_token(
            owner=owner.user, name="fuzz", scopes=["read", "act", "approve"]
        ).secret,
        known={
            "project_id": [project.pk],
            "mission_id": [mission.pk, finished_mission.pk],
            "run_id": [run.pk, child.pk, finished.pk],
            "approval_id": [approval.pk],
            "question_id": [question.pk],
            "schedule_id": [schedule.pk],
            "sha256": [artifact.sha256],
            "provider": ["anthropic", "openai"],
            "scope": ["project/7", "global"],
        },
    )


def operations() -> list[tuple[str, str]]:
    """Every (path, method) of the schema, one test each (collected once, at import)."""
    from agentos.api import api

    paths = api.get_openapi_schema()["paths"]
    return [(path, method) for path, methods in paths.items() for method in methods]


# The pytest plugin's lazy schema (`schemathesis.pytest.from_fixture`) needs a pytest internal
# that pytest 9 removed; each operation's strategy is driven by Hypothesis here instead.
@pytest.mark.parametrize(("path", "method"), operations())
def test_no_request_gets_a_server_error(target: Target, path: str, method: str) -> None:
    operation = target.schema[path][method.upper()]
    strategy = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,  # the same examples every run: a failure is a bug, not bad luck
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def fuzz(case: schemathesis.Case[Any]) -> None:
        if case.path_parameters:
            case.path_parameters = {
                name: target.known_or(name, value) for name, value in case.path_parameters.items()
            }
        if isinstance(case.body, dict) and "project_id" in case.body:
            project_id = target.known_or("project_id", case.body["project_id"])
            case.body = {**case.body, "project_id": project_id}
        case.call_and_validate(
            headers={"Authorization": f"Bearer {target.secret}"},
            checks=[not_a_server_error, response_schema_conformance, content_type_conformance],
        )

    fuzz()


# --- What the schema does not describe: no token, a body over the limit, a method it lacks ------

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def security(operation: Any) -> set[str]:
    """The schemes that open an operation: none for the public ones (health)."""
    return {name for scheme in operation.definition.raw.get("security", []) for name in scheme}


def concrete(target: Target, path: str) -> str:
    """The schema's path with an existing value for each parameter."""
    for name, values in target.known.items():
        path = path.replace("{" + name + "}", str(values[0]))
    return path


def assert_json_error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    error: dict[str, Any] = json.loads(response.content)["error"]
    assert isinstance(error["code"], str)
    assert error["message"]
    return error


@pytest.mark.parametrize(("path", "method"), operations())
def test_no_operation_answers_a_script_without_a_token_but_401(
    target: Target, path: str, method: str
) -> None:
    operation = target.schema[path][method.upper()]
    client = Client(enforce_csrf_checks=True)  # as a script meets production: CSRF enforced

    response = client.generic(
        method.upper(), concrete(target, path), "{}", content_type="application/json"
    )

    if not security(operation):  # public: health
        assert response.status_code < 500
    else:
        assert_json_error(response, 401)
        assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("path", "method"), operations())
def test_no_operation_fails_on_a_body_over_the_limit(
    target: Target, settings: Settings, path: str, method: str
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    operation = target.schema[path][method.upper()]
    body = json.dumps({"text": "x" * 5000, "name": "x" * 5000})

    response = Client().generic(
        method.upper(),
        concrete(target, path),
        body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {target.secret}"},
    )

    assert response.status_code < 500, response.content[:300]
    # With a token, an operation that reads a body refuses it first; the session-only ones
    # (token management) answer 401 before reading anything.
    if "requestBody" in operation.definition.raw and "OwnerToken" in security(operation):
        assert assert_json_error(response, 413)["code"] == "body_too_large"


@pytest.mark.parametrize("path", sorted({path for path, _method in operations()}))
def test_every_path_answers_a_method_it_lacks_405_with_allow(target: Target, path: str) -> None:
    from agentos.api import api

    allowed = sorted(method.upper() for method in api.get_openapi_schema()["paths"][path])
    for method in sorted(set(METHODS) - set(allowed)):
        response = Client().generic(
            method,
            concrete(target, path),
            "{}",
            content_type="application/json",
            headers={"Authorization": f"Bearer {target.secret}"},
        )

        assert assert_json_error(response, 405)["details"] == {"allowed": allowed}
        assert response["Allow"] == ", ".join(allowed)
