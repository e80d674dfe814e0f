from __future__ import annotations

from django import forms
from django.utils.functional import lazy
from django.utils.translation import gettext_lazy as _

from agentos.core import scopes, tokens
from agentos.core.models import Scope, default_scopes


class SignInForm(forms.Form):
    username = forms.CharField(
        label=_("Username"),
        max_length=150,
        widget=forms.TextInput(attrs={"autocomplete": "username"}),
    )
    password = forms.CharField(
        label=_("Password"),
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )
    # Not `required`: a missing code is refused by `signin.sign_in`, which audits it.
    code = forms.CharField(
        label=_("Code"),
        required=False,
        max_length=16,
        help_text=_("6 digits from your authenticator app, or a backup code."),
        # A text keypad: backup codes have letters (a numeric one could not type them).
        widget=forms.TextInput(
            attrs={
                "autocomplete": "one-time-code",
                "inputmode": "text",
                "autocapitalize": "none",
                "autocorrect": "off",
                "spellcheck": "false",
            }
        ),
    )
    # Filled by static/passkeys.js with the browser's answer when the owner uses a passkey.
    passkey = forms.CharField(required=False, max_length=16_000, widget=forms.HiddenInput)


class TokenForm(forms.Form):
    name = forms.CharField(
        label=_("Name"),
        max_length=80,
        help_text=_("What will use it, e.g. 'backup script'."),
    )
    scopes = forms.MultipleChoiceField(
        label=_("Scopes"),
        choices=Scope.choices,
        initial=default_scopes,
        widget=forms.CheckboxSelectMultiple,
        help_text=lazy(scopes.help_text, str)(),
    )
    days = forms.IntegerField(
        label=_("Expires after (days)"),
        min_value=1,
        max_value=tokens.MAX_DAYS,
        initial=tokens.DEFAULT_DAYS,
    )
