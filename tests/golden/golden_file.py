"""Writing a golden file, or checking it is up to date (``--check``): the recorders' last step."""

from pathlib import Path


def write_or_check(golden: Path, text: str, *, check: bool, recorded: str) -> int:
    """Write ``text`` to ``golden``, or with ``check`` compare them; the exit status.

    ``recorded`` says what was written, for the message (e.g. "12 scenarios").
    """
    if check:
        stored = golden.read_text() if golden.exists() else ""
        if stored != text:
            print(f"{golden.name} is out of date; re-run without --check")
            return 1
        print(f"{golden.name} is up to date")
        return 0
    golden.write_text(text)
    print(f"wrote {golden} ({recorded})")
    return 0
