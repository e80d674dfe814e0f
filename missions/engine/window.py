"""The agent loop's context window: the thread sent to the model, its size as last counted or
estimated, and what keeps it inside the model's window (clearing old tool results, then
compaction into a structured summary, each decision journaled so a replay decides the same).

The size is exact after each model response (the provider counts its request) and estimated
for what is appended after it; a decision taken on an estimate is first checked with the
provider's own count.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass, replace
from typing import Any

from kernel.context import Done, RunContext, StepCall
from kernel.models import Effect, StepKind, Trust
from memory import skills as memory_skills
from memory import tasks as memory_tasks
from missions.engine import framing, model_call, relief
from missions.engine.prompt import Prefix
from missions.engine.relief import Verbatim
from missions.engine.spec import Spec
from missions.models import Mission, ModelInfo
from missions.providers.base import Conversation, Options, Provider, ProviderError

OWNER_PREFIX = "Message from the owner: "


@dataclass
class Window:
    """The thread of one execution of a run, and how full the model's window is."""

    ctx: RunContext
    provider: Provider
    spec: Spec
    tools: list[Any]  # the prefix's tool definitions, as the provider counts them
    options: Options
    conversation: Conversation
    verbatim: Verbatim
    limit: int  # the model's window, in tokens
    server_clearing: bool
    size: int
    compactions: int = 0

    @classmethod
    def open(
        cls,
        ctx: RunContext,
        provider: Provider,
        spec: Spec,
        prefix: Prefix,
        options: Options,
        conversation: Conversation,
    ) -> Window:
        """The window of a run that starts or resumes with `conversation` (one journaled step)."""
        # Recorded once: a window edited in the catalog mid-run must not move the compaction
        # points of a replay (the journal would no longer match the program).
        limit, server_clearing = model_facts(
            ctx.step(
                StepKind.CHECKPOINT,
                effect=Effect.READ,
                name="context-window",
                request={},
                execute=lambda call: Done(_context_facts(provider, spec)),
            )
        )
        if server_clearing:
            # The provider clears old tool results on its side: the thread we keep stays whole.
            options = replace(options, server_clearing=relief.server_clearing(limit))
        return cls(
            ctx=ctx,
            provider=provider,
            spec=spec,
            tools=prefix.tools,
            options=options,
            conversation=conversation,
            verbatim=Verbatim(goal=spec.goal, constraints=spec.constraints, owner_messages=[]),
            limit=limit,
            server_clearing=server_clearing,
            size=relief.estimate_tokens(prefix.system) + relief.estimate_tokens(conversation.items),
        )

    def fit(self, turn: int) -> str | None:
        """Make the thread fit before the model is asked at `turn`: 1. clear old tool results,
        2. else compact; None when it fits, else why it cannot."""
        # Clearing is ours unless the provider does it, and only worth it a batch at a time
        # (looked at only past its threshold: it reads the whole thread).
        clearing = (
            self.size > relief.CLEAR_AT * self.limit
            and not self.server_clearing
            and not self._keeps_cache()
            and relief.clearable(self.conversation.items)
        )
        if self.size > (relief.CLEAR_AT if clearing else relief.COMPACT_AT) * self.limit:
            self.size = self._count(turn=turn, estimate=self.size)
        if clearing and relief.CLEAR_AT * self.limit < self.size <= relief.COMPACT_AT * self.limit:
            cleared = relief.clear_old_tool_results(self.conversation.items)
            if cleared:
                self.size = self._estimate()
        if self.size > relief.COMPACT_AT * self.limit:
            self.compactions += 1
            memory_tasks.consolidate_soon(
                memory_scope(self.ctx), why=f"run {self.ctx.run_id} compacted its context"
            )
            self.conversation = self._compact(turn=turn)
            self.size = self._estimate()
            if self.size > relief.COMPACT_AT * self.limit:
                self.size = self._count(turn=turn, estimate=self.size)
            if self.size > relief.COMPACT_AT * self.limit:
                # Even the summary does not fit: going on would fail at the provider, or loop.
                return (
                    f"the context does not fit the {self.limit}-token window even after"
                    f" compaction ({self.size} tokens estimated)"
                )
        return None

    def _keeps_cache(self) -> bool:
        """Whether old tool results stay until compaction: for runs that weigh the prompt cache
        (`Spec.cache_aware_clearing`) on a provider that has one. A clearing rewrites the cached
        thread from its first cleared result: every token after it is written again (at 1.25
        times the input price on Anthropic) instead of read (a tenth), which costs more than
        reading the cleared results from the cache until compaction, the band clearing buys
        being a few turns' growth. Cleared every few turns, a thread of large results had a
        third of its input written again."""
        return self.spec.cache_aware_clearing and self.provider.caches_prompts

    def take(self, response: dict[str, Any]) -> None:
        """Append a recorded model response: the owner's messages it delivered, then its items."""
        for text in response.get("owner_messages", []):
            append_user_text(self.provider, self.conversation.items, from_owner(text))
            self.verbatim.owner_messages.append(text)
        self.conversation.items.extend(response["items"])
        usage = response["usage"]
        # The provider counted this request exactly; what we append next is estimated.
        self.size = (
            usage["input_tokens"]
            + usage["cache_read_tokens"]
            + usage["cache_write_tokens"]
            + usage["output_tokens"]
        ) or self.size + relief.estimate_tokens(response["items"])

    def tell(self, text: str, *, prefix: str = "") -> None:
        """Append a user message (`prefix` + `text`) of ours to the thread."""
        append_user_text(self.provider, self.conversation.items, prefix + text)
        # The estimate leaves `prefix` out, as it always has: a replay's count steps must carry
        # the estimates their recorded requests hold.
        self.size += relief.estimate_tokens(text)

    def add(self, items: list[dict[str, Any]]) -> None:
        """Append the tool results of a turn."""
        self.conversation.items.extend(items)
        self.size += relief.estimate_tokens(items)

    def _estimate(self) -> int:
        return relief.estimate_tokens(self.conversation.system) + relief.estimate_tokens(
            self.conversation.items
        )

    def _count(self, *, turn: int, estimate: int) -> int:
        """The size of the next request as the provider counts it (a journaled read, so a replay
        decides the same), or `estimate` where the provider has no counting endpoint or the count
        failed: a count is worth a decision, not a failed run."""
        provider, conversation = self.provider, self.conversation
        if not provider.counts_tokens:
            return estimate

        def counted(call: StepCall) -> Done:
            try:
                return Done(
                    {"tokens": provider.count_tokens(conversation, self.tools, self.options)}
                )
            except ProviderError as error:
                return Done({"tokens": None, "error": f"{error.code}: {error.message}"})

        result = self.ctx.step(
            StepKind.CHECKPOINT,
            effect=Effect.READ,
            name="count-tokens",
            request={"turn": turn, "estimate": estimate},
            execute=counted,
        )
        tokens = result.get("tokens")
        return int(tokens) if isinstance(tokens, int) else estimate

    def _compact(self, *, turn: int) -> Conversation:
        """Fold the conversation into our structured summary (a journaled `compaction` step).

        The goal, constraints and owner instructions are copied by the harness, word for word;
        the model only writes the progress narrative. The new conversation starts from that
        summary.
        """
        ctx, provider, spec, conversation = self.ctx, self.provider, self.spec, self.conversation
        result = ctx.step(
            StepKind.COMPACTION,
            effect=Effect.MODEL_CALL,
            name=spec.model,
            request={"turn": turn, "compaction": self.compactions},
            execute=functools.partial(self._summarise, conversation, turn),
        )
        # A user message, never the system prompt: the re-read files in it are data.
        summary = relief.summary_message(
            self.verbatim,
            result["narrative"],
            compactions=self.compactions,
            files=result.get("files", {}),
            # Absent from older journals: the agent's. What the compaction step holds is as
            # trusted as the kernel records it (the model's).
            from_repository=result.get("from_repository"),
            trust=framing.trust_of(ctx.records[ctx.seq]) if spec.data_framing else None,
        )
        items = [provider.user_message(summary)]
        give_memory(provider, items, spec)  # as the run began: the summary replaces the thread
        return Conversation(
            provider=provider.name, system=conversation.system, items=items, turn=turn
        )

    def _summarise(self, conversation: Conversation, turn: int, call: StepCall) -> Done:
        """The compaction step's work: the model's narrative of the thread, and the working files
        re-read."""
        ctx, provider, spec = self.ctx, self.provider, self.spec
        # Old tool results are cleared from what the summariser reads (already done on our
        # side, unless the provider clears them on its own and our thread is whole).
        items = copy.deepcopy(conversation.items)
        relief.clear_old_tool_results(items)
        transcript = Conversation(
            provider=provider.name,
            system=relief.COMPACTION_SYSTEM
            + (f"\n{framing.DATA_RULE}" if spec.data_framing else ""),
            items=[provider.user_message(json.dumps(items, ensure_ascii=False))],
            turn=turn,
        )
        # Not interruptible: the thread is being folded, the owner's message waits for the
        # next turn; a stop still ends it at once.
        done = model_call.call(
            provider,
            transcript,
            [],
            replace(self.options, purpose="compaction"),
            spec,
            call,
            interruptible=False,
        )
        # Rehydration: the working files are re-read now and recorded with the summary, so a
        # replay rebuilds the same context even if the files changed since.
        found = relief.rehydrate(ctx.run.workspace, run_id=ctx.run_id)
        return Done(
            {"narrative": done.result["text"], "usage": done.result["usage"], **found},
            done.cost,
        )


def memory_scope(ctx: RunContext) -> str | None:
    """The memory of the run's project, consolidated when the run compacts and when it ends."""
    project = Mission.objects.filter(pk=ctx.run.account_id).values_list("project_id", flat=True)
    found = project.first()
    return f"project/{found}" if found else None


def _context_facts(provider: Provider, spec: Spec) -> dict[str, Any]:
    """The model's window (the run's own figure, else the catalog's, else a default) and
    whether its provider clears old tool results server-side (where the catalog, read from the
    model listing, says the model has the provider's clearing capability)."""
    known = ModelInfo.objects.filter(provider=provider.name, model=spec.model).first()
    capabilities = known.capabilities if known is not None else {}
    return {
        "window": spec.context_window
        or (known.context_window if known is not None else None)
        or relief.DEFAULT_WINDOW,
        "server_clearing": relief.supports_server_clearing(
            capabilities, provider.clearing_capability
        ),
    }


def model_facts(recorded: Any) -> tuple[int, bool]:
    """(window, server-side clearing) from the recorded checkpoint; runs recorded before the
    checkpoint said more than the window hold a bare number, and clear on our side."""
    if isinstance(recorded, int):
        return recorded, False
    return int(recorded["window"]), bool(recorded["server_clearing"])


def give_memory(provider: Provider, items: list[dict[str, Any]], spec: Spec) -> None:
    """The run's memory index, as data after the opening message, for runs that get it so; then
    the index of the skills it is offered (none for runs started before skills)."""
    given = framing.memory(spec.memory_index) if spec.memory_as_data else ""
    if given:
        append_user_text(provider, items, given)
    offered = framing.skills(memory_skills.index(spec.skills))
    if offered:
        append_user_text(provider, items, offered)


def from_owner(text: str) -> str:
    """A steering message, as the owner's: `steering` records each as the owner's."""
    return framing.render(OWNER_PREFIX + text, trust=Trust.OWNER, source="owner")


def append_user_text(provider: Provider, items: list[dict[str, Any]], text: str) -> None:
    """Add a user message; merged into a trailing user message (tool results) where the
    provider's format has content lists, since some providers want roles to alternate."""
    item = provider.user_message(text)
    last = items[-1] if items else None
    if (
        last is not None
        and last.get("role") == "user"
        and isinstance(last.get("content"), list)
        and isinstance(item.get("content"), list)
    ):
        last["content"] = [*last["content"], *item["content"]]
    else:
        items.append(item)
