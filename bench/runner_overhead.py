"""Runner overhead: the same scripted one-tool invocation on google-adk and on ours.

Start it with our venv's python::

    .venv/bin/python bench/runner_overhead.py [--invocations 2000] [--repeats 3]

Each side runs in its own process: google-adk with the ADK venv's python (``_adk_side.py``),
ours with this python (``_ours_side.py``); both run ``_workload.py``, so the agent, tool, model
script and timing loop are the same code. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
LOCAL_ADK_VENV = BENCH / ".venv-adk"
ADK_REQUIREMENT = "google-adk==2.13.0"
TARGET_RATIO = 5.0


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def resolve_adk_python(option: str | None) -> Path:
    """--adk-python, else bench/.venv-adk, else create bench/.venv-adk."""
    if option:
        return Path(option)
    local = _venv_python(LOCAL_ADK_VENV)
    if local.exists():
        return local
    base = shutil.which("python3") or sys.executable
    print(
        f"No google-adk venv found: creating {LOCAL_ADK_VENV} "
        f"({base} -m venv, then pip install {ADK_REQUIREMENT}); this takes a minute.",
        flush=True,
    )
    subprocess.run([base, "-m", "venv", str(LOCAL_ADK_VENV)], check=True)
    subprocess.run([str(local), "-m", "pip", "install", "--quiet", ADK_REQUIREMENT], check=True)
    return local


def _side_command(python: Path, script: str, args: argparse.Namespace, *extra: str) -> list[str]:
    return [
        str(python),
        str(BENCH / script),
        "--invocations",
        str(args.invocations),
        "--warmup",
        str(args.warmup),
        *extra,
    ]


def _side_env() -> dict[str, str]:
    # No PYTHONPATH: the ADK side must see only its own venv (and never our package).
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _report_stderr(label: str, text: str) -> None:
    lines = text.splitlines()
    if lines:
        print(f"  note: {label} wrote {len(lines)} stderr line(s); first: {lines[0][:160]}")


class Side:
    """One side's process in serve mode: warmed up once, then one repeat per request."""

    def __init__(self, label: str, python: Path, script: str, args: argparse.Namespace) -> None:
        self.label = label
        self.command = _side_command(python, script, args, "--serve")
        self._stderr = tempfile.TemporaryFile(mode="w+")  # a file, so a chatty side cannot block
        self.proc = subprocess.Popen(
            self.command,
            cwd=REPO,
            env=_side_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.result: dict[str, Any] = {}

    def _read(self, kind: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                message = json.loads(line)
                if message.get("kind") == kind:
                    return message
        self._fail(f"ended before sending {kind!r}")
        raise AssertionError  # unreachable

    def _fail(self, why: str) -> None:
        self.proc.kill()
        self.proc.wait()
        self._stderr.seek(0)
        sys.stderr.write(self._stderr.read()[-4000:])
        raise SystemExit(f"{self.label} side {why} (exit {self.proc.returncode}): {self.command}")

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait_ready(self) -> None:
        """Wait for the end of the side's warm-up; keep its header (shape, version...)."""
        self.result = self._read("ready")
        self.result["repeats"] = []

    def repeat(self) -> dict[str, Any]:
        """Run one timed repeat on this side."""
        self._send("repeat")
        result = self._read("repeat")
        self.result["repeats"].append(result)
        return result

    def finish(self) -> dict[str, Any]:
        """Stop the side; return everything it reported."""
        self._send("quit")
        self.result["max_rss_mb_end"] = self._read("done")["max_rss_mb_end"]
        self.proc.stdin.close()  # type: ignore[union-attr]
        if self.proc.wait(timeout=60) != 0:
            self._fail("failed")
        self._stderr.seek(0)
        _report_stderr(self.label, self._stderr.read())
        self._stderr.close()
        return self.result


def run_interleaved(adk_python: Path, args: argparse.Namespace) -> tuple[dict, dict]:
    """Start both sides, warm them up, then alternate their repeats (ADK first on even rounds)."""
    print(f"warming up each side in turn ({args.warmup} invocations) ...", flush=True)
    adk = Side("google-adk", adk_python, "_adk_side.py", args)
    adk.wait_ready()  # one after the other, so neither start-up slows the other
    ours = Side("ours", Path(sys.executable), "_ours_side.py", args)
    ours.wait_ready()
    for round_no in range(args.repeats):
        order = (adk, ours) if round_no % 2 == 0 else (ours, adk)
        for side in order:
            result = side.repeat()
            print(
                f"  repeat {round_no + 1}/{args.repeats} {side.label:<10} "
                f"{result['throughput']:8.1f} inv/s  p50 {result['p50_ms']:.3f} ms",
                flush=True,
            )
    return adk.finish(), ours.finish()


def run_profiled(args: argparse.Namespace) -> None:
    """Ours once more, standalone, one repeat under cProfile; print our hotspots."""
    path = str(Path(args.profile_ours).resolve())
    command = _side_command(
        Path(sys.executable), "_ours_side.py", args, "--repeats", "1", "--profile", path
    )
    print(f"\nprofiling ours: {' '.join(command[1:])} ...", flush=True)
    proc = subprocess.run(command, cwd=REPO, env=_side_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"profiled run failed (exit {proc.returncode})")
    _report_stderr("ours (cProfile)", proc.stderr)
    print_profile(path, args.profile_limit)


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _fmt_list(values: list[float], digits: int) -> str:
    return " ".join(f"{v:.{digits}f}" for v in values)


def describe_shape(shape: dict[str, Any]) -> list[str]:
    """Readable lines for one invocation's events."""
    lines = []
    for i, event in enumerate(shape["events"]):
        lines.append(
            f"  #{i} author={event['author']} role={event['role']} "
            f"parts={event['parts']} final={event['is_final_response']}"
            + (f" state_delta={event['state_delta']}" if event["state_delta"] else "")
        )
    lines.append(
        f"  session after: {shape['stored_events']} stored events (user message + 3), "
        f"state={shape['session_state']}; model calls: {len(shape['model_saw'])}"
    )
    return lines


def compare_shapes(adk: dict[str, Any], ours: dict[str, Any]) -> bool:
    """Print the event shape of one invocation on both sides; True if identical."""
    same = adk["shape"] == ours["shape"]
    if same:
        print(
            "\nevent shape of one invocation: IDENTICAL on both sides "
            "(same events, stored events, state and model inputs)"
        )
        print("\n".join(describe_shape(ours["shape"])))
    else:
        print("\nevent shape of one invocation: MISMATCH (the comparison is not like for like)")
        for side in (adk, ours):
            print(f" {side['framework']}:")
            print("\n".join(describe_shape(side["shape"])))
            for i, saw in enumerate(side["shape"]["model_saw"]):
                print(f"  model call {i} saw: {saw}")
    return same


def summarize(side: dict[str, Any]) -> dict[str, Any]:
    """Medians over repeats of throughput, p50 and p99."""
    repeats = side["repeats"]
    return {
        "throughput": [r["throughput"] for r in repeats],
        "p50": [r["p50_ms"] for r in repeats],
        "p99": [r["p99_ms"] for r in repeats],
    }


def print_table(adk: dict[str, Any], ours: dict[str, Any], args: argparse.Namespace) -> float:
    """The comparison table; returns the throughput ratio ours/ADK."""
    a, o = summarize(adk), summarize(ours)
    tp_ratio = _median(o["throughput"]) / _median(a["throughput"])
    p50_ratio = _median(o["p50"]) / _median(a["p50"])
    p99_ratio = _median(o["p99"]) / _median(a["p99"])
    head_a = f"google-adk {adk['version']}"
    head_o = f"ours ({ours['version']})"
    width = max(24, 7 * args.repeats + 2)
    row = f"{{:<30}}{{:>{width}}}{{:>{width}}}{{:>22}}"
    print(
        f"\n{args.invocations} sequential invocations x {args.repeats} repeats per side, after "
        f"{args.warmup} warm-up; Python {ours['python']} (ours) / {adk['python']} (ADK).\n"
        "One invocation = create_session + run_async drained (3 events, 2 model calls); "
        "the session is deleted after it (not in the latency, in the throughput wall time).\n"
        "Repeats alternate between the sides (ADK first in odd rounds, ours first in even).\n"
        "NOTE: shared, noisy machine: absolute figures drift between runs; "
        "compare the ratios of one run.\n"
    )
    print(row.format("", head_a, head_o, "ours/ADK"))
    print(
        row.format(
            "invocations/s (median)",
            f"{_median(a['throughput']):.1f}",
            f"{_median(o['throughput']):.1f}",
            f"{tp_ratio:.2f}x",
        )
    )
    print(
        row.format("  per repeat", _fmt_list(a["throughput"], 0), _fmt_list(o["throughput"], 0), "")
    )
    print(
        row.format(
            "p50 latency ms (median)",
            f"{_median(a['p50']):.3f}",
            f"{_median(o['p50']):.3f}",
            f"{p50_ratio:.3f} ({1 / p50_ratio:.1f}x faster)",
        )
    )
    print(row.format("  per repeat", _fmt_list(a["p50"], 2), _fmt_list(o["p50"], 2), ""))
    print(
        row.format(
            "p99 latency ms (median)",
            f"{_median(a['p99']):.3f}",
            f"{_median(o['p99']):.3f}",
            f"{p99_ratio:.3f}",
        )
    )
    print(row.format("  per repeat", _fmt_list(a["p99"], 2), _fmt_list(o["p99"], 2), ""))
    print(
        row.format(
            "first invocation ms",
            f"{adk['first_invocation_ms']:.1f}",
            f"{ours['first_invocation_ms']:.1f}",
            "",
        )
    )
    print(
        row.format(
            "max RSS MB warm-up -> end",
            f"{adk['max_rss_mb_after_warmup']} -> {adk['max_rss_mb_end']}",
            f"{ours['max_rss_mb_after_warmup']} -> {ours['max_rss_mb_end']}",
            "",
        )
    )
    verdict = "MET" if tp_ratio >= TARGET_RATIO else "NOT MET"
    print(f"\ntarget: ours >= {TARGET_RATIO:.0f}x ADK throughput -> {verdict} ({tp_ratio:.2f}x)")
    return tp_ratio


def print_profile(path: str, limit: int) -> None:
    """Top functions of our code in a cProfile dump, by own time and by cumulative time."""
    import pstats

    stats = pstats.Stats(path)
    for key in ("tottime", "cumulative"):
        print(f"\n--- ours, profiled (cProfile, orchestrator/ only), sorted by {key} ---")
        stats.sort_stats(key).print_stats(r"/orchestrator/", limit)


def main(argv: list[str] | None = None) -> int:
    """Run both sides, print the table; exit 2 if the event shapes differ."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--invocations", type=int, default=2000, help="per repeat (2000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per side (3)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed invocations first (200)")
    parser.add_argument(
        "--adk-python",
        help="python of a venv with google-adk 2.13 (default: "
        "bench/.venv-adk, else create bench/.venv-adk)",
    )
    parser.add_argument(
        "--profile-ours",
        metavar="PSTATS",
        help="afterwards, run ours once "
        "more under cProfile (1 repeat), save to PSTATS, print our hotspots",
    )
    parser.add_argument("--profile-limit", type=int, default=25, help="rows per profile table")
    parser.add_argument("--save", metavar="JSON", help="also write both sides' raw results here")
    args = parser.parse_args(argv)
    if args.invocations < 1 or args.repeats < 1 or args.warmup < 1:
        parser.error("--invocations, --repeats and --warmup must be >= 1")
    if args.repeats < 3:
        print("warning: fewer than 3 repeats; medians are fragile on a shared machine")

    adk_python = resolve_adk_python(args.adk_python)
    adk, ours = run_interleaved(adk_python, args)
    if adk["version"] != ADK_REQUIREMENT.split("==")[1]:
        print(
            f"warning: ADK side is google-adk {adk['version']}, not "
            f"{ADK_REQUIREMENT.split('==')[1]}"
        )
    same = compare_shapes(adk, ours)
    ratio = print_table(adk, ours, args)
    if args.save:
        Path(args.save).write_text(json.dumps({"adk": adk, "ours": ours}) + "\n")
        print(f"raw results written to {args.save}")
    if args.profile_ours:
        run_profiled(args)
    elif ratio < TARGET_RATIO:
        print("below target: rerun with --profile-ours ours.pstats to see our hotspots")
    return 0 if same else 2


if __name__ == "__main__":
    sys.exit(main())
