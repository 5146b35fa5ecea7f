"""The README's shell commands run as written after its set-up command, venv not activated.

The set-up makes ``.venv`` and installs the project there, so ``adk-celery`` (and ``celery``,
``pip``, ``python``) are in ``.venv/bin``, not on PATH: a command written bare fails with
"command not found" for a newcomer who copies it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import ROOT

VENV_TOOLS = {"adk-celery", "celery", "pip", "python", "pytest", "ruff"}
"""Commands the set-up installs into .venv/bin."""
ELSEWHERE = {"docker"}
"""Commands that run the tools somewhere else (``docker compose exec`` runs in a container)."""


def shell_commands() -> list[list[str]]:
    """Each command line of the README's ``bash`` blocks, split into words."""
    blocks = re.findall(r"^```bash\n(.*?)^```", (ROOT / "README.md").read_text(),
                        re.MULTILINE | re.DOTALL)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            for part in re.split(r"&&|\|\|", line.split(" # ")[0]):
                words = shlex.split(part, comments=True)
                if words:
                    commands.append(words)
    return commands


def test_every_readme_command_names_the_venv_tools_by_path():
    commands = shell_commands()
    assert any(words[0] == ".venv/bin/adk-celery" for words in commands)
    bare = [" ".join(words) for words in commands
            if words[0] in VENV_TOOLS and words[0] not in ELSEWHERE]
    assert bare == [], "write these as .venv/bin/<command>"


@pytest.mark.parametrize("subcommand", sorted({
    words[1] for words in shell_commands() if words[0] == ".venv/bin/adk-celery"}))
def test_each_readme_adk_celery_command_runs_without_activating_the_venv(subcommand):
    # The interpreter running the tests is the set-up's .venv/bin/python (tests/run.sh).
    script = Path(sys.executable).parent / "adk-celery"
    env = {**os.environ, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run([str(script), subcommand, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"adk-celery {subcommand}" in done.stdout
