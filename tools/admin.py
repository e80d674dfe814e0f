"""The admin as the policy editor: permission rules (deny → ask → allow) per tool and pattern."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from tools import registry
from tools.models import PermissionRule


class PermissionRuleForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = PermissionRule
        fields = ["project", "tool", "pattern", "decision", "note"]

    def clean_tool(self) -> str:
        name = str(self.cleaned_data["tool"]).strip()
        if name != "*" and registry.get(name) is None:
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
        if not change:
            obj.created_by = request.user.get_username()
        super().save_model(request, obj, form, change)
