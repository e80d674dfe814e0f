"""What the New mission form says of each provider: whether a goal can be sent to it, and why.

A key says it for the cloud providers; the compatible endpoint is ready once its base URL and
model are set, its key being optional (`providers.registry.ready`). `keys.status` stays what it
is, the state of the keys alone (the Settings API lists it).
"""

from __future__ import annotations

from django.utils.translation import gettext as _

from missions import endpoints, keys
from missions.providers import registry


def states() -> list[dict[str, object]]:
    """One row per provider: `provider`, `configured` (a run can be sent to it) and `source`
    (where it was set: the environment, the console, or the endpoint's model)."""
    rows = []
    for item in keys.status():
        provider = str(item["provider"])
        if provider in registry.KEY_OPTIONAL:
            served = endpoints.get(provider)
            item = {
                **item,
                "configured": served is not None,
                "source": _("%(model)s at %(url)s")
                % {"model": served.model, "url": served.base_url}
                if served is not None
                else None,
            }
        rows.append(item)
    return rows
