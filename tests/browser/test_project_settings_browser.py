"""The project page's Long work settings against the real stack, on a phone (390 by 844) and a
laptop (1280 by 800): a refused criterion is said next to its field and keeps what was typed,
saved settings are shown, and the instructions are imported from AGENTS.md at the default
branch head. No sideways scroll, no serious accessibility violation."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from missions.models import Project
from tests.browser.conftest import assert_accessible, screenshot
from tests.browser.layout import no_sideways_scroll
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.live import Stack
from tools import workspace

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("viewport", [(390, 844), (1280, 800)], ids=["phone", "laptop"])
def test_the_owner_sets_the_long_work_settings_and_imports_agents_md(
    page: Page, stack: Stack, live_owner: Owner, viewport: tuple[int, int], tmp_path: Path
) -> None:
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    repository = tmp_path / "site"
    subprocess.run(["git", "init", "-q", str(repository)], check=True)
    (repository / "AGENTS.md").write_text("Write the tests first.\n")
    workspace.host_git(repository, "add", "AGENTS.md")
    workspace.host_git(repository, "commit", "--quiet", "-m", "first")
    project = Project.objects.create(name="site", repository=str(repository))
    sign_in(page, stack, live_owner)
    page.goto(stack.url + f"/projects/{project.pk}/")

    page.get_by_label("Project instructions").fill("Answer in English.")
    page.get_by_label("Default criteria").fill("$ make test\n$ ")
    page.get_by_label("Smoke command").fill("sh init.sh")
    page.get_by_role("button", name="Save settings").click()

    refused = page.locator(".field:has(#id_default_criteria) .errorlist").first
    expect(refused).to_contain_text("its command is a non-empty shell command")
    expect(page.get_by_label("Smoke command")).to_have_value("sh init.sh")
    no_sideways_scroll(page)
    assert_accessible(page)
    screenshot(page, f"project-settings-refused-{width}")

    page.get_by_label("Default criteria").fill("$ make test")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_label("Default criteria")).to_have_value("$ make test")
    project.refresh_from_db()
    assert project.smoke_command == "sh init.sh"

    page.get_by_role("button", name="Import instructions from AGENTS.md").click()
    expect(page.locator("[data-instructions-from]")).to_contain_text("AGENTS.md at ")
    expect(page.get_by_label("Project instructions")).to_have_value("Write the tests first.")
    no_sideways_scroll(page)
    assert_accessible(page)
    screenshot(page, f"project-settings-{width}")
    assert not page.csp_violations  # type: ignore[attr-defined]
