"""The project page's "Long work" form (`missions.project_settings_views` saves it)."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from missions import project_settings, verification
from missions.models import Project


class SettingsForm(forms.Form):
    instructions = forms.CharField(
        label=_("Project instructions"),
        required=False,
        max_length=project_settings.MAX_INSTRUCTIONS,
        widget=forms.Textarea(attrs={"rows": 6}),
        help_text=_(
            "In the system prompt of every run of this project, from its start. Only what you"
            " save here: a run's own AGENTS.md is never read as instructions."
        ),
    )
    default_criteria = forms.CharField(
        label=_("Default criteria"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text=_(
            "For missions that give none, one per line: $ command (must succeed in the"
            " worktree), or a statement an evaluator checks."
        ),
    )
    smoke_command = forms.CharField(
        label=_("Smoke command"),
        required=False,
        max_length=project_settings.MAX_SMOKE,
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocapitalize": "none"}),
        help_text=_(
            "Run in the sandbox when a run starts and each time it resumes; a failure is the"
            " first thing its agent reads. Empty: the worktree's init.sh, if it has one."
        ),
    )


def form_for(project: Project) -> SettingsForm:
    return SettingsForm(
        initial={
            "instructions": project.instructions,
            "default_criteria": verification.to_lines(project.default_criteria or []),
            "smoke_command": project.smoke_command,
        }
    )
