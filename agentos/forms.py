from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _


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
        widget=forms.TextInput(
            attrs={"autocomplete": "one-time-code", "inputmode": "numeric", "spellcheck": "false"}
        ),
    )


class TokenForm(forms.Form):
    name = forms.CharField(
        label=_("Name"),
        max_length=80,
        help_text=_("What will use it, e.g. 'backup script'."),
    )
