from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from approvals.models import Verdict


class DecisionForm(forms.Form):
    # The hash of the call the page showed: a decision never applies to a call the owner did
    # not see (`approvals.service.decide` compares it with the approval's own).
    args_hash = forms.CharField(max_length=128, widget=forms.HiddenInput)
    decision = forms.ChoiceField(
        choices=[("approve", _("Approve")), ("refuse", _("Refuse")), ("always", _("Always"))]
    )
    note = forms.CharField(
        label=_("Note to the agent (optional)"),
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("Sent with a refusal, e.g. what to do instead."),
    )


class AnswerForm(forms.Form):
    text = forms.CharField(
        label=_("Your answer"), max_length=10000, widget=forms.Textarea(attrs={"rows": 4})
    )


class VerdictForm(forms.Form):
    verdict = forms.ChoiceField(choices=Verdict.choices)
    result = forms.CharField(
        label=_("What it returned (optional)"),
        required=False,
        max_length=10000,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_(
            "With “it happened”: recorded as the step's result, which the run goes on with."
        ),
    )
