"""The API's global budget: the global caps (a daily spend cap, runs executing at once, a new
mission's default caps) and the spend caps per model provider; changed through
`kernel.budgets`, audited there."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Field, Router, Schema
from pydantic import ConfigDict, StrictInt

from agentos.core import audit
from kernel import budgets
from missions.blueprints import INT32, INT64

router = Router(tags=["settings"])


class BudgetOut(Schema):
    daily_usd_micros: int | None = Field(description="Daily spend cap, micro-dollars; null: none")
    max_running_runs: int = Field(description="Runs executing at once, all missions together")
    mission_usd_micros: int | None = Field(
        description="A new mission's spend cap when it sets none, micro-dollars; null: none"
    )
    mission_tokens: int | None = Field(
        description="A new mission's token cap when it sets none; null: none"
    )
    mission_seconds: int | None = Field(
        description="A new mission's wall-time cap when it sets none, seconds; null: none"
    )


class BudgetPatch(Schema):
    model_config = ConfigDict(extra="forbid")

    daily_usd_micros: StrictInt | None = Field(None, ge=1, le=INT64)
    max_running_runs: StrictInt = Field(None, ge=0, le=INT32)  # type: ignore[assignment]  # never null
    mission_usd_micros: StrictInt | None = Field(None, ge=1, le=INT64)
    mission_tokens: StrictInt | None = Field(None, ge=1, le=INT64)
    mission_seconds: StrictInt | None = Field(None, ge=1, le=INT32)


@router.get("/settings/budget", response=BudgetOut, tags=["settings"], summary="Global caps")
def get_budget(request: HttpRequest) -> dict[str, int | None]:
    return budgets.global_caps()


@router.patch(
    "/settings/budget", response=BudgetOut, tags=["settings"], summary="Change global caps"
)
def update_budget(request: HttpRequest, payload: BudgetPatch) -> dict[str, int | None]:
    return budgets.set_global_caps(
        payload.model_dump(exclude_unset=True), actor=audit.Actor.of(request)
    )


class ProviderCapsIn(Schema):
    model_config = ConfigDict(extra="forbid")

    day: StrictInt | None = Field(None, ge=1, le=INT64, description="Micro-dollars a UTC day")
    month: StrictInt | None = Field(
        None, ge=1, le=INT64, description="Micro-dollars a UTC month; both null: no cap"
    )


@router.get(
    "/settings/budget/providers",
    response=dict[str, dict[str, int | None]],
    tags=["settings"],
    summary="Spend caps per model provider",
)
def get_provider_caps(request: HttpRequest) -> dict[str, dict[str, int | None]]:
    return budgets.provider_caps()


@router.put(
    "/settings/budget/providers/{provider}",
    response=dict[str, dict[str, int | None]],
    tags=["settings"],
    summary="Set a model provider's daily and monthly spend caps",
)
def set_provider_caps(
    request: HttpRequest, provider: str, payload: ProviderCapsIn
) -> dict[str, dict[str, int | None]]:
    return budgets.set_provider_caps(
        provider, day=payload.day, month=payload.month, actor=audit.Actor.of(request)
    )
