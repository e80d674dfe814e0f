"""A project's frozen environment: its setup commands build /env once per version on the node
that runs its commands; every shell command of its runs sees it read-only, /env/bin first on its
PATH; the run's placements record which version they used; new setup commands, a new version."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings

from cluster.models import Placement
from missions import environments as project_environments
from missions.models import Mission
from tests.tools.conftest import AgentRun, calls, outputs
from tools import workspace

pytestmark = pytest.mark.django_db(transaction=True)

SETUP = (
    "mkdir -p /env/bin && printf '#!/bin/sh\\necho greetings from /env\\n' > /env/bin/greet"
    " && chmod 755 /env/bin/greet && date +%s%N > /env/built"
)
FINISH = {"text": "Done."}


def shell(command: str) -> dict[str, object]:
    return calls(("shell", {"command": command}))


def test_the_projects_commands_run_with_its_environment_built_once(
    hostile: AgentRun, hostile_mission: tuple[Mission, Path]
) -> None:
    mission, _ = hostile_mission
    project = mission.project
    project = project_environments.configure(project, setup=SETUP)
    expected = project_environments.of_project(project)
    assert expected is not None

    run = hostile(
        [
            shell("greet; cat /env/built"),
            shell("cat /env/built; touch /env/mine || echo read-only"),
            FINISH,
        ]
    )

    assert run.status == "done", run.error
    first, second = (out["output"].splitlines() for out in outputs(run, "shell"))
    assert first[0] == "greetings from /env"
    assert second[0] == first[1]  # the same snapshot: not built again
    assert "read-only" in second
    used = set(
        Placement.objects.filter(step_id__startswith=f"run-{run.pk}-").values_list(
            "environment", flat=True
        )
    )
    assert used == {expected.label}
    built = Path(settings.DATA_DIR) / "node" / "environments" / expected.name / expected.version
    assert (built / "bin" / "greet").is_file()
    assert not built.stat().st_mode & 0o222  # frozen: nobody writes it


def test_changed_setup_commands_build_a_new_version_beside_the_old(
    hostile: AgentRun, hostile_mission: tuple[Mission, Path]
) -> None:
    mission, _ = hostile_mission
    project = mission.project
    project_environments.configure(project, setup=SETUP)
    before = hostile([shell("greet"), FINISH])
    project_environments.configure(project, setup=SETUP.replace("greetings", "hello"))

    after = hostile([shell("greet"), FINISH])

    assert outputs(before, "shell")[0]["output"].startswith("greetings from /env")
    assert outputs(after, "shell")[0]["output"].startswith("hello from /env")


def test_a_failing_setup_is_told_to_the_model_and_nothing_runs(
    hostile: AgentRun, hostile_mission: tuple[Mission, Path]
) -> None:
    mission, _ = hostile_mission
    project = mission.project
    project_environments.configure(project, setup="echo no toolchain here >&2; exit 3")

    run = hostile([shell("touch ran.txt"), FINISH])

    (out,) = outputs(run, "shell")
    assert out["is_error"] is True
    assert "the setup command of environment" in out["output"]
    assert "no toolchain here" in out["output"]
    assert not (Path(run.workspace) / "ran.txt").exists()


# Each way a file of the repository feeds the setup commands: (the file, the project's content,
# the setup commands). The setup writes what it read to /env/marker.
FED = {
    "script": (
        "setup.sh",
        "#!/bin/sh\nmkdir -p /env && echo project > /env/marker\n",
        "./setup.sh",
    ),
    "requirements": (
        "requirements.txt",
        "project\n",
        "mkdir -p /env && sed -n 1p requirements.txt > /env/marker",
    ),
    "package": ("package.json", "project\n", "mkdir -p /env && cat package.json > /env/marker"),
    "sourced": (
        "env.sh",
        "MARK=project\n",
        '. ./env.sh && mkdir -p /env && echo "$MARK" > /env/marker',
    ),
}


@pytest.mark.parametrize("way", sorted(FED))
def test_a_run_that_rewrites_what_the_setup_reads_gets_the_projects_environment(
    hostile: AgentRun, hostile_mission: tuple[Mission, Path], way: str
) -> None:
    mission, repo = hostile_mission
    name, content, setup = FED[way]
    (repo / name).write_text(content)
    (repo / name).chmod(0o755)
    workspace.host_git(repo, "add", name)
    workspace.host_git(repo, "commit", "--quiet", "-m", f"{name} of the project")
    project_environments.configure(mission.project, setup=setup)
    hostile_content = content.replace("project", "hostile")

    run = hostile(
        [
            calls(("read_file", {"path": name})),
            calls(("write_file", {"path": name, "content": hostile_content})),
            calls(("git_commit", {"message": "mine"})),
            shell("cat /env/marker; pwd"),
            FINISH,
        ]
    )
    later = hostile([shell("cat /env/marker"), FINISH])

    assert run.status == "done", run.error
    assert outputs(run, "shell")[0]["output"].splitlines()[0] == "project"
    assert outputs(later, "shell")[0]["output"].splitlines()[0] == "project"
