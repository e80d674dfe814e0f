from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from agentos.core.models import ApiToken, AuditEvent, SignInThrottle


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Records are written by services only; the admin shows them."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "kind", "username", "address"]
    list_filter = ["kind"]
    search_fields = ["username", "address"]
    date_hierarchy = "at"


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "prefix",
        "scopes",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    exclude = ["digest"]


@admin.register(SignInThrottle)
class SignInThrottleAdmin(ReadOnlyAdmin):
    list_display = ["address", "username", "failures", "last_failure_at", "blocked_until"]
    search_fields = ["address", "username"]

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # The owner may lift a delay they caused themselves (from a verified admin session).
        return True
