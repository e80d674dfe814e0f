"""The Web tools: `web_search` and `web_fetch` (docs/design.md §13, §19).

Both fetch at level 0, in the worker running the step, through the run's egress
(`missions.web_pages`): nothing runs in a sandbox, nothing fetched is executed. What they return
is the Web's (`Trust.WEB`, rendered as data of that trust) and a call marks its run tree as
having read untrusted content (`kernel.exposure.UNTRUSTED`).

`web_fetch` never gives the acting agent the page. As journaled steps of its run:

1. `web-fetch-page`: marks the tree untrusted, fetches the page, stores it as an artifact — the
   step's result holds the artifact's hash, never the text. Its result commits with the intent
   of the reader's spawn (one commit per step, docs/design.md §7): a replay after that returns
   it, and the page is not fetched twice; a crash before it fetches the page again;
2. spawns the reader (`missions.web_reader`), a child run without tools whose input holds the
   page as a data block, and joins it (a durable wait);
3. `web-fetch-answer` checks the reader's answer (its schema, its quotes), and the call's
   result is that structured answer, or the error saying why there is none.

With `render: true` the page is read by a real browser in the run's level-2 virtual machine
(`missions.web_browser`), for pages whose text their scripts write; the rest is the same.

A sensitive run (its mission's `sensitive`, `Spec.sensitive`) plans before it reads: both tools
refuse until its mission's ledger has a plan (`missions.ledger.sensitive_refusal`).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from kernel import artifacts, exposure, runs
from kernel.context import Done, RunContext, StepCall
from kernel.models import Artifact, Effect, Run, StepKind, Trust
from missions import ledger, search, web_browser, web_pages, web_reader
from missions.engine.spec import Spec
from missions.models import Mission
from missions.web_pages import Page
from tools.base import Risk, Tool, ToolEnv, ToolError, Worksite

SEARCH = "web_search"
FETCH = "web_fetch"
# Both read content from outside, and both send something out: a query, a URL that can carry
# what the run knows (the rule of two counts a Web read as a communication too).
EXPOSES = frozenset({exposure.UNTRUSTED, exposure.OUTWARD})
QUESTION_CHARS = 2000
SCHEMA_CHARS = 10_000

# Who fetches: the egress fetcher; a browser in a virtual machine can be another `Fetcher`.
FETCHER: web_pages.Fetcher = web_pages.fetch
BROWSER: web_browser.Renderer = web_browser.fetch


def _not_here(env: ToolEnv, arguments: dict[str, Any]) -> str:
    raise RuntimeError("web_fetch runs through `interact`")  # pragma: no cover


# --- web_search ----------------------------------------------------------------------------------


def _search(env: ToolEnv, arguments: dict[str, Any]) -> str:
    refusal = ledger.sensitive_refusal(env.run_id, SEARCH)
    if refusal:
        raise ToolError(refusal)
    # The harness marks the tree from `exposes`; marked here too, before the request, since a
    # search's snippets are read the moment it answers (idempotent: the first step is kept).
    exposure.mark(env.run_id, EXPOSES, seq=env.call.seq, by=f"{SEARCH} {arguments['query']}")
    results = search.search(env.run_id, arguments["query"], int(arguments.get("count", 5)))
    return json.dumps(
        [{"title": r.title, "url": r.url, "snippet": r.snippet} for r in results],
        ensure_ascii=False,
        indent=1,
    )


WEB_SEARCH = Tool(
    name=SEARCH,
    description=(
        "Search the Web with the owner's search backend: titles, URLs and short snippets"
        " (the Web's words, as data). Read a result with web_fetch."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 500},
            "count": {"type": "integer", "minimum": 1, "maximum": search.MAX_RESULTS},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    # A read at level 0: the egress policy decides every host, the rule of two the rest.
    risk=Risk.READ,
    run=_search,
    trust=Trust.WEB,
    exposes=EXPOSES,
)


# --- web_fetch -----------------------------------------------------------------------------------


def _fetch(ctx: RunContext, worksite: Worksite, arguments: dict[str, Any]) -> str:
    url, question = arguments["url"], arguments["question"]
    render = bool(arguments.get("render"))
    schema = _schema(arguments.get("schema"))
    if ctx.run.depth >= runs.MAX_DEPTH:
        raise ToolError(
            f"{FETCH}: this run is at depth {ctx.run.depth} of its run tree, the deepest a run"
            " tree goes: the reader a page needs cannot be started here. Ask your parent to"
            " fetch it."
        )
    fetched = ctx.step(
        StepKind.CHECKPOINT,
        # Storing the page is an idempotent write (content-addressed): a fetch whose result was
        # not journaled yet is asked again.
        effect=Effect.IDEMPOTENT_WRITE,
        name="web-fetch-page",
        request={"url": url, "render": True} if render else {"url": url},
        execute=lambda call: Done(_page_step(ctx, call, url, render=render)),
    )
    if "error" in fetched:
        raise ToolError(fetched["error"])
    page = _page_of(fetched)
    parent = Spec.from_input(ctx.input)
    mission = Mission.objects.get(pk=ctx.run.account_id)
    reader = web_reader.reader_input(
        parent=parent, mission=mission, page=page, question=question, schema=schema
    )
    child = ctx.spawn("agent", reader, caps=web_reader.CAPS)
    ctx.join([child])

    def judge(call: StepCall) -> Done:
        answer, problem = web_reader.result(Run.objects.get(pk=child), page)
        return Done({"answer": answer} if answer is not None else {"error": f"{FETCH}: {problem}."})

    judged = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.READ,
        name="web-fetch-answer",
        request={"reader": child},
        execute=judge,
    )
    if "error" in judged:
        raise ToolError(judged["error"])
    text = json.dumps(judged["answer"], ensure_ascii=False, indent=1)
    # The call's result: the reader's checked answer, the only thing of the page the model reads.
    result = ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.READ,
        name=FETCH,
        request={"url": url, "reader": child},
        execute=lambda call: Done({"output": text, "is_error": False}),
    )
    return str(result["output"])


def _schema(given: dict[str, Any] | None) -> dict[str, Any]:
    """The answer's schema: the default, or the one given if it is a JSON schema of an object."""
    if not given:
        return web_reader.DEFAULT_SCHEMA
    if len(json.dumps(given)) > SCHEMA_CHARS:
        raise ToolError(f"{FETCH}: a schema has at most {SCHEMA_CHARS} characters of JSON.")
    try:
        jsonschema.validators.validator_for(given).check_schema(given)
    except jsonschema.exceptions.SchemaError as error:
        raise ToolError(f"{FETCH}: the schema is not a JSON schema: {error.message}.") from None
    if given.get("type") != "object":
        raise ToolError(f'{FETCH}: the schema describes a JSON object ("type": "object").')
    return given


def _page_step(
    ctx: RunContext, call: StepCall, url: str, *, render: bool = False
) -> dict[str, Any]:
    """The fetch, as the page step records it: the page's facts and its text's artifact, or the
    error the model reads."""
    refusal = ledger.sensitive_refusal(ctx.run_id, FETCH)
    if refusal:
        return {"error": refusal}
    try:
        url = web_pages.check_url(url)
        # Before the request: a step killed mid-fetch counts as having read (kernel.exposure).
        exposure.mark(ctx.run_id, EXPOSES, seq=call.seq, by=f"{FETCH} {url}")
        page = BROWSER(call, url) if render else FETCHER(ctx.run_id, url)
    except ToolError as error:
        return {"error": f"{FETCH}: {error}"}
    # The page as the reader will read it, in one artifact: the parent's journal holds its
    # hash, never a word of it (not even its title).
    stored = artifacts.store(
        content=json.dumps(page.as_dict(), ensure_ascii=False).encode(),
        name=f"web page {page.final_url}"[: artifacts.NAME_MAX],
        media_type="application/json",
        run=ctx.run,
        preview_chars=0,
    )
    return {
        "url": page.url,
        "final_url": page.final_url,
        "content_type": page.content_type,
        "page_sha256": stored.sha256,
        "chars": len(page.text),
    }


def _page_of(fetched: dict[str, Any]) -> Page:
    """The page the step stored, read back from its artifact."""
    stored = Artifact.objects.get(sha256=fetched["page_sha256"])
    with artifacts.open_artifact(stored) as handle:
        return Page(**json.load(handle))


WEB_FETCH = Tool(
    name=FETCH,
    description=(
        "Learn something from a web page without reading it yourself: a reader with no tools"
        " reads the page and answers your question as JSON matching `schema` (default:"
        ' {"facts": [{"fact", "quote", "url"}]}); each quote is checked against the page, and'
        " facts whose quote is not in it are dropped. You get only that answer, as data."
        " Set `render` for a page whose text its scripts write: a real browser reads it"
        " (slower: it starts in a virtual machine)."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "url": {"type": "string", "minLength": 1, "maxLength": web_pages.MAX_URL},
            "question": {"type": "string", "minLength": 1, "maxLength": QUESTION_CHARS},
            "schema": {"type": "object"},
            "render": {"type": "boolean"},
        },
        "required": ["url", "question"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    run=_not_here,
    interact=_fetch,
    trust=Trust.WEB,
    exposes=EXPOSES,
)

WEB_TOOLS = [WEB_SEARCH, WEB_FETCH]
