"""A project's push credential, set on its page (`missions.project_views.project_credential`)
rather than in the Django admin. Write-only: typed in, encrypted by the vault
(`tools.remotes.put`), never shown again; only its kind, its remote and when it was set are."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agentos.core import audit
from agentos.core.models import AuditEvent
from missions.models import Project
from tools import remotes
from tools.errors import ToolConfigError
from tools.models import CredentialKind

MAX_SECRET = 20_000


class CredentialForm(forms.Form):
    remote = forms.CharField(label=gettext_lazy("Remote"), max_length=100, initial="origin")
    kind = forms.ChoiceField(label=gettext_lazy("Kind"), choices=CredentialKind.choices)
    username = forms.CharField(
        label=gettext_lazy("User name"),
        max_length=200,
        required=False,
        help_text=gettext_lazy("For a token over HTTPS; empty: the one most hosts accept."),
    )
    secret = forms.CharField(
        label=gettext_lazy("Token or SSH private key"),
        max_length=MAX_SECRET,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off", "spellcheck": "false"}),
        help_text=gettext_lazy("Kept encrypted; never shown again. Setting it again replaces it."),
    )


def save(request: HttpRequest, project: Project, form: CredentialForm) -> bool:
    """Store the credential of a valid form, with its audit event; False when the store
    refused it (its error added to the form). A refused form never shows its secret again."""
    data = form.cleaned_data
    try:
        with transaction.atomic():
            remotes.put(
                project_id=project.pk,
                remote=data["remote"],
                kind=data["kind"],
                secret=data["secret"],
                username=data["username"],
            )
            audit.record_by(
                AuditEvent.Kind.REMOTE_CREDENTIAL_CHANGED,
                audit.Actor.of(request),
                project=project.pk,
                remote=data["remote"],
                credential=data["kind"],
            )
    except ToolConfigError as refused:
        form.add_error("secret", refused.message)
        return False
    messages.success(
        request, _("The push credential of %(remote)s is saved.") % {"remote": data["remote"]}
    )
    return True


def without_secret(form: CredentialForm) -> CredentialForm:
    """The refused form as the page shows it again: everything but the secret."""
    form.data = {key: form.data.get(key) for key in form.data if key != "secret"}
    return form
