"""A project's frozen environment: its setup commands build /env once per version on the node
that runs its commands; every shell command of its runs sees it read-only, /env/bin first on its
PATH; the run's placements record which version they used; new setup commands, a new version."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from django.conf import settings

from cluster.identity import builder, identity
from cluster.models import Placement
from missions import environments as project_environments
from missions.models import EnvironmentStatus, Mission, Project
from tests.tools.conftest import AgentRun, calls, outputs
from tools import workspace

WHO = project_environments.Who(by="owner", username="owner", address=None)

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
    project = project_environments.configure(project, setup=SETUP, who=WHO)
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
    project_environments.configure(project, setup=SETUP, who=WHO)
    before = hostile([shell("greet"), FINISH])
    project_environments.configure(project, setup=SETUP.replace("greetings", "hello"), who=WHO)

    after = hostile([shell("greet"), FINISH])

    assert outputs(before, "shell")[0]["output"].startswith("greetings from /env")
    assert outputs(after, "shell")[0]["output"].startswith("hello from /env")


def test_a_failing_setup_is_told_to_the_model_and_nothing_runs(
    hostile: AgentRun, hostile_mission: tuple[Mission, Path]
) -> None:
    mission, _ = hostile_mission
    project = mission.project
    project_environments.configure(project, setup="echo no toolchain here >&2; exit 3", who=WHO)

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
    project_environments.configure(mission.project, setup=setup, who=WHO)
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


PROBE = (
    'mkdir -p /env && { echo "uid=$(id -u)"; echo "pwd=$(pwd)"; echo "head=$(git rev-parse HEAD)";'
    ' echo "changed=$(git status --porcelain | wc -l)"; echo "planted=$(cat planted.txt 2>&1)";'
    ' echo "readme=$(sed -n 1p README.md)"; } > /env/probe'
)


def test_the_build_runs_in_a_clean_checkout_of_the_pinned_commit_as_no_run(
    hostile: AgentRun, hostile_mission: tuple[Mission, Path]
) -> None:
    mission, repo = hostile_mission
    project = project_environments.configure(mission.project, setup=PROBE, who=WHO)
    # Built at once by the owner's save; removed so that the run's first command must build it.
    built = Path(settings.DATA_DIR) / "node" / "environments" / f"project-{project.pk}"
    subprocess.run(["/bin/rm", "-rf", str(built)], check=True)

    run = hostile(
        [
            calls(("write_file", {"path": "planted.txt", "content": "the run's\n"})),
            calls(("read_file", {"path": "README.md"})),
            calls(("write_file", {"path": "README.md", "content": "the run's readme\n"})),
            shell("cat /env/probe"),
            FINISH,
        ]
    )

    assert run.status == "done", run.error
    lines = outputs(run, "shell")[0]["output"].splitlines()
    seen = dict(line.split("=", 1) for line in lines if "=" in line)
    assert int(seen["uid"]) == builder()[0]
    assert int(seen["uid"]) != identity(run.pk)[0] or os.geteuid() != 0
    assert seen["pwd"] == "/workspace"  # the checkout's mount, as a run's worktree is
    assert seen["head"] == project.environment_commit
    assert seen["head"] == workspace.host_git(repo, "rev-parse", "HEAD").stdout.strip()
    assert seen["changed"] == "0"  # a clean checkout
    assert "No such file" in seen["planted"]
    assert seen["readme"] == (repo / "README.md").read_text().splitlines()[0]
    assert not list((workspace.root() / "environment-builds").iterdir())  # removed after


def test_a_new_commit_or_new_commands_make_a_new_version_and_the_same_pair_the_same(
    hostile_mission: tuple[Mission, Path],
) -> None:
    mission, repo = hostile_mission

    def pair(project: Project) -> tuple[str, str]:
        return project.environment_version, project.environment_commit

    project = project_environments.configure(mission.project, setup=SETUP, who=WHO)
    first = pair(project)
    again = pair(project_environments.rebuild(project, who=WHO))
    assert again == first
    assert project.environment_status == EnvironmentStatus.BUILT

    (repo / "more.txt").write_text("more\n")
    workspace.host_git(repo, "add", "more.txt")
    workspace.host_git(repo, "commit", "--quiet", "-m", "more")
    moved = pair(project_environments.rebuild(project, who=WHO))
    changed = pair(project_environments.configure(project, setup=SETUP + " && true", who=WHO))

    assert moved[1] == workspace.host_git(repo, "rev-parse", "HEAD").stdout.strip()
    assert moved[1] != first[1]
    assert changed[1] == moved[1]
    assert len({first[0], moved[0], changed[0]}) == 3


def test_a_run_never_moves_the_pinned_commit(
    hostile: AgentRun, hostile_mission: tuple[Mission, Path]
) -> None:
    mission, _ = hostile_mission
    project = project_environments.configure(mission.project, setup=SETUP, who=WHO)
    pinned = project.environment_commit

    run = hostile(
        [
            calls(("write_file", {"path": "new.txt", "content": "x\n"})),
            calls(("git_commit", {"message": "mine"})),
            shell("greet"),
            FINISH,
        ]
    )
    project_environments.rebuild(project, who=WHO)

    assert run.status == "done", run.error
    assert project.environment_commit == pinned  # the run's commit is not the project's
