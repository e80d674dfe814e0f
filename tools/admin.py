"""The admin as the policy editor: permission rules (deny → ask → allow) per tool and pattern, the
credentials the host pushes with, and the trust and effect classes of MCP servers."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from agentos.core import audit, vault
from tools import actions, registry
from tools.mcp import servers, toolset
from tools.mcp.models import SHOWN_FIELDS, McpServer, McpTool
from tools.models import CredentialKind, PermissionRule, RemoteCredential


class PermissionRuleForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = PermissionRule
        fields = ["project", "tool", "pattern", "decision", "note"]

    def clean_tool(self) -> str:
        name = str(self.cleaned_data["tool"]).strip()
        if name != "*" and registry.TOOLS.get(name) is None and toolset.by_name(name) is None:
            raise forms.ValidationError(
                _("No tool named %(name)s. Use a tool name or * for every tool."),
                params={"name": name},
            )
        return name


@admin.register(PermissionRule)
class PermissionRuleAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = PermissionRuleForm
    list_display = ["decision", "tool", "pattern", "project", "note", "created_by", "created_at"]
    list_filter = ["decision", "tool", "project"]
    search_fields = ["tool", "pattern", "note"]

    def save_model(self, request: Any, obj: PermissionRule, form: Any, change: bool) -> None:
        if change:  # an edit in the back office: no action of the owner's covers it
            super().save_model(request, obj, form, change)
            return
        obj.created_by = request.user.get_username()
        actions.add_permission_rule(rule=obj, actor=audit.Actor.of(request))

    def delete_model(self, request: Any, obj: PermissionRule) -> None:
        actions.remove_permission_rule(rule=obj, actor=audit.Actor.of(request))

    def delete_queryset(self, request: Any, queryset: QuerySet[PermissionRule]) -> None:
        # One event per rule, as when each is removed from the Tools screen.
        for rule in queryset:
            actions.remove_permission_rule(rule=rule, actor=audit.Actor.of(request))


class RemoteCredentialForm(forms.ModelForm):  # type: ignore[type-arg]
    """The secret is write-only: typed in, encrypted, never shown again (only its last four
    characters for a token)."""

    secret = forms.CharField(
        label=_("secret"),
        widget=forms.Textarea(attrs={"rows": 4, "autocomplete": "off"}),
        help_text=_("The token, or the SSH private key. Leave empty to keep the stored one."),
        required=False,
        strip=True,
    )

    class Meta:
        model = RemoteCredential
        fields = ["project", "remote", "kind", "username"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not self.instance.pk and not cleaned.get("secret"):
            self.add_error("secret", _("A new credential needs its secret."))
        return cleaned


@admin.register(RemoteCredential)
class RemoteCredentialAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = RemoteCredentialForm
    list_display = ["project", "remote", "kind", "username", "hint", "updated_at"]
    list_filter = ["project", "kind"]

    def save_model(self, request: Any, obj: RemoteCredential, form: Any, change: bool) -> None:
        secret = form.cleaned_data.get("secret")
        if secret:
            obj.ciphertext = vault.encrypt(secret)
            obj.hint = secret[-4:] if obj.kind == CredentialKind.TOKEN else ""
        super().save_model(request, obj, form, change)


class McpToolInline(admin.TabularInline):  # type: ignore[type-arg]
    model = McpTool
    extra = 0
    can_delete = False
    fields = ["name", "effect", "description", "description_hash", "pinned_hash", "listed"]
    readonly_fields = ["name", "description", "description_hash", "pinned_hash", "listed"]

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False  # tools come from the server's listing only


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The owner's trust in a server and its tools' effect classes, saved through the same
    action as the API's (`tools.mcp.servers.update`, audited); registering and approving are
    the API's and `manage.py mcp_add`'s (they list the server in the sandbox first)."""

    inlines = [McpToolInline]
    list_display = ["name", "transport", "status", "trusted", "version", "approved_at"]
    list_filter = ["status", "trusted", "transport"]
    fields = SHOWN_FIELDS
    readonly_fields = [field for field in SHOWN_FIELDS if field != "trusted"]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def save_model(self, request: Any, obj: McpServer, form: Any, change: bool) -> None:
        servers.update(server=obj, trusted=obj.trusted, actor=audit.Actor.of(request))

    def save_formset(self, request: Any, form: Any, formset: Any, change: bool) -> None:
        effects = {tool.name: tool.effect for tool in formset.save(commit=False)}
        if effects:
            servers.update(server=form.instance, effects=effects, actor=audit.Actor.of(request))
