"""How every console form renders its fields: after a refused POST the page opens on the first
field with an error (`autofocus`: the browser focuses it and scrolls it into view, no script
needed), not at the top with the error off-screen on a phone. Set as FORM_RENDERER."""

from __future__ import annotations

from typing import Any

from django.forms import BaseForm, BoundField, Widget
from django.forms.renderers import DjangoTemplates


class FocusingBoundField(BoundField):
    def build_widget_attrs(self, attrs: dict[str, Any], widget: Widget | None = None) -> Any:
        attrs = super().build_widget_attrs(attrs, widget)
        if self.form.is_bound and self.name == first_invalid(self.form):
            attrs["autofocus"] = True
        return attrs


def first_invalid(form: BaseForm) -> str | None:
    """The field the page should open on: the first visible one, in the form's order, with an
    error; the form's first visible field when only the form as a whole was refused (its error
    summary is rendered just above its fields)."""
    errors = form.errors
    if not errors:
        return None
    visible: list[str] = [name for name, field in form.fields.items() if not field.widget.is_hidden]
    for name in visible:
        if name in errors:
            return name
    return visible[0] if visible else None


class ConsoleRenderer(DjangoTemplates):
    bound_field_class = FocusingBoundField
