"""Who this server says it is to push services (VAPID, RFC 8292): the contact it sends as `sub`
and the public key browsers subscribe with. The owner sets the contact in Settings; until then
the server's setting (AGENTOS_PUSH_CONTACT) is used. The private key is never shown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.core.validators import validate_email
from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agentos.core import audit
from agentos.core.errors import DomainError
from agentos.core.models import AuditEvent, PushState
from approvals import push

MAX_CONTACT = 200


class ContactRefused(DomainError):
    status = 400
    code = "bad_push_contact"


@dataclass(frozen=True)
class Sender:
    contact: str
    from_settings: bool  # the owner has not set one: the server's setting is used
    public_key: str


def sender() -> Sender:
    saved = push.state().contact
    return Sender(
        contact=saved or str(settings.PUSH_CONTACT),
        from_settings=not saved,
        public_key=push.public_key(),
    )


def check_contact(text: str) -> str:
    """A contact push services accept: `mailto:` an address, or an `https:` URL."""
    contact = text.strip()
    if len(contact) > MAX_CONTACT:
        raise ContactRefused(
            _("The contact is too long (at most %(n)d characters).") % {"n": MAX_CONTACT}
        )
    if contact.startswith("mailto:"):
        try:
            validate_email(contact.removeprefix("mailto:"))
        except forms.ValidationError:
            raise ContactRefused(_("“%(c)s” is not an email address.") % {"c": contact}) from None
        return contact
    parts = urlsplit(contact)
    if parts.scheme == "https" and parts.hostname:
        return contact
    raise ContactRefused(
        _("A contact is mailto:you@example.org or an https:// address; “%(c)s” is neither.")
        % {"c": contact}
    )


def set_contact(*, contact: str, actor: audit.Actor) -> Sender:
    """Save the owner's contact (checked first: nothing is saved when it is refused)."""
    checked = check_contact(contact)
    row = push.state()
    with transaction.atomic():
        PushState.objects.filter(pk=row.pk).update(contact=checked)
        audit.record_by(AuditEvent.Kind.PUSH_SENDER_CHANGED, actor, contact=checked)
    return sender()


class ContactForm(forms.Form):
    contact = forms.CharField(
        label=gettext_lazy("Contact"),
        max_length=MAX_CONTACT,
        help_text=gettext_lazy(
            "Push services may write to it about this server's notifications: mailto: an "
            "address, or an https:// page. Apple's service refuses a made-up one."
        ),
    )

    def clean_contact(self) -> str:
        try:
            return check_contact(self.cleaned_data["contact"])
        except ContactRefused as refused:
            raise forms.ValidationError(refused.message) from None


def panel(form: ContactForm | None = None) -> dict[str, Any]:
    """What the Settings section shows: the sender as it is, and its form."""
    current = sender()
    return {
        "sender": current,
        "form": form or ContactForm(initial={"contact": current.contact}),
    }
