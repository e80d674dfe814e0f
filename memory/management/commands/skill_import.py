"""`manage.py skill_import PATH|URL`: the owner's import of a skill, as a proposal to approve."""

from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentos.core import audit
from memory import skill_proposals
from memory.skills import SkillError


class Command(BaseCommand):
    help = (
        "Propose a skill from a folder on this machine or the http(s) URL of a SKILL.md; runs"
        " are offered it once the owner approves the proposal (POST"
        " /api/v1/skills/proposals/<id>/decision)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source", help="A skill's folder, or an http(s) URL of a SKILL.md.")

    def handle(self, *args: Any, source: str, **options: Any) -> None:
        is_url = source.startswith(("http://", "https://"))
        actor = audit.Actor(by=f"{getpass.getuser()} (manage.py skill_import)")
        try:
            proposal = skill_proposals.import_skill(
                path="" if is_url else source, url=source if is_url else "", actor=actor
            )
        except SkillError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"Proposed {proposal.id}: approve it on its diff.\n{proposal.diff}")
