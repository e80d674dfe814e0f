from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The bottom layer's models (owner, tokens, security log, idempotency, push). Its label
    stays `agentos`: the tables and migrations predate the split into a bottom and a shell."""

    default = True
    name = "agentos.core"
    label = "agentos"
    verbose_name = "agentos: owner and access"

    def ready(self) -> None:
        from agentos.core.vault import VAULT_FIELDS

        VAULT_FIELDS.add("agentos.PushState", "vapid_private")  # rotated with the other secrets
