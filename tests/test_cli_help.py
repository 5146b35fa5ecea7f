"""``adk-celery COMMAND --help`` describes every argument a command takes, positionals too."""

from __future__ import annotations

import re
import sys
from concurrent.futures import ThreadPoolExecutor

from tests.support import forked


def help_of(*argv: str) -> str:
    done = forked.run([sys.executable, "-m", "workers.cli", *argv, "--help"], timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def undescribed_positionals(text: str) -> list[str]:
    """The entries of the help's "positional arguments:" section that have no description."""
    section = text.split("positional arguments:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    bare = []
    for at, line in enumerate(section):
        if re.match(r"  \S", line):  # an entry; its description on its line or the next
            name, _, description = line.strip().partition("  ")
            continued = at + 1 < len(section) and re.match(r"   +\S", section[at + 1])
            if not description.strip() and not continued:
                bare.append(name)
    return bare


def test_every_positional_argument_of_every_command_is_described():
    commands = re.search(r"\{([a-z,-]+)\}", help_of()).group(1).split(",")
    assert {"enqueue", "follow", "status", "answer", "cancel", "sessions"} <= set(commands)
    with ThreadPoolExecutor(4) as pool:  # one process per command, a few at a time
        texts = dict(zip(commands, pool.map(help_of, commands), strict=True))
    with_positionals = {
        command: undescribed_positionals(text) for command, text in texts.items()
        if "positional arguments:" in text
    }
    assert {"enqueue", "follow", "status", "answer", "cancel", "sessions"} <= set(with_positionals)
    assert {c: bare for c, bare in with_positionals.items() if bare} == {}
