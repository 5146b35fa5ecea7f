"""``adk-celery follow`` (and ``enqueue --follow``): an invocation's live stream, printed."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import TYPE_CHECKING, Any, TextIO

from workers.cli_types import seconds

if TYPE_CHECKING:
    from orchestrator.distributed.models import InvocationStatus
    from orchestrator.distributed.streams import StreamItem
    from orchestrator.events.event import Event
    from workers.client import Client


QUEUED_HINT_SECONDS = 5.0
"""How long a follow sees an invocation queued before it says on stderr what that may mean."""


def add_follow_args(parser: argparse.ArgumentParser, timeout_default: str,
                    needs: str | None = None,
                    until_default: str = "follow until it ends") -> None:
    """Add ``--timeout`` (its default described by ``timeout_default``) and ``--until-paused``.

    ``needs``: the options without which they are refused (said in their help);
    ``until_default``: what happens without ``--until-paused``.
    """
    only = f"; only with {needs}" if needs else ""
    parser.add_argument("--timeout", type=seconds, default=None,
                        help=f"give up after this many seconds (exit status 2; default: "
                             f"{timeout_default}{only})")
    parser.add_argument("--until-paused", action="store_true",
                        help=f"stop when the invocation pauses (default: {until_default}{only})")


class _QueuedHint:
    """Says once on stderr that the invocation is still queued after ``after`` seconds."""

    def __init__(self, app_name: str, after: float, err: TextIO) -> None:
        self._text = (f"adk-celery: still queued after {after:g} s: is an orchestrator running "
                      f"for app {app_name!r} (`adk-celery orchestrator` with it in "
                      "ADK_CELERY_APPS)?")
        self._err = err
        self._lock = threading.Lock()
        self._queued = True
        self._timer = threading.Timer(after, self._say)
        self._timer.daemon = True
        self._timer.start()

    def saw(self, status: InvocationStatus) -> None:
        """A status of the invocation: anything but queued ends the hint's wait."""
        if status.value != "queued":
            self.cancel()

    def cancel(self) -> None:
        with self._lock:
            self._queued = False
        self._timer.cancel()

    def _say(self) -> None:
        with self._lock:
            if self._queued:
                print(one_line(self._text), file=self._err, flush=True)


def follow(client: Client, args: argparse.Namespace, out: TextIO | None = None, *,
           err: TextIO | None = None, queued_hint_after: float = QUEUED_HINT_SECONDS) -> int:
    """Print the invocation's live stream and final status; return the exit status.

    0: completed (or paused, with ``--until-paused``); 1: failed or cancelled; 2: timed out.
    An invocation still queued after ``queued_hint_after`` seconds gets a line on ``err``
    (stderr) asking whether an orchestrator serves its app.
    """
    from orchestrator.distributed.models import InvocationStatus

    out = out or sys.stdout
    printer = EventPrinter(out)
    until = InvocationStatus.SETTLED if args.until_paused else InvocationStatus.FINISHED
    last: InvocationStatus | None = None
    items = client.follow(args.app_name, args.invocation_id, timeout=args.timeout, until=until)
    hint = _QueuedHint(args.app_name, queued_hint_after, err or sys.stderr)
    try:
        for item in items:
            printer.print(item)
            if item.status is not None:
                hint.saw(item.status)
                if item.status in until:
                    last = item.status
    except TimeoutError as error:
        printer.end_line()
        out.flush()
        return timed_out(client, args.app_name, args.invocation_id, error)
    finally:
        hint.cancel()
    record = client.status(args.app_name, args.invocation_id)
    if record is not None and record.error:
        print(f"error: {one_line(record.error)}", file=out)
    if record is not None and last is InvocationStatus.PAUSED and record.pending_calls:
        print(f"waiting for: {one_line(', '.join(record.pending_calls))}", file=out)
    out.flush()
    return exit_status(last)


def timed_out(client: Client, app_name: str, invocation_id: str, error: TimeoutError) -> int:
    """Say on stderr that a wait or follow gave up, with the status last seen and what to do; 2."""
    from orchestrator.distributed.models import InvocationStatus

    record = client.status(app_name, invocation_id)
    hint = ""
    if record is not None and record.status is InvocationStatus.QUEUED:
        hint = (" Last seen queued: no orchestrator has taken it: is `adk-celery orchestrator` "
                "running with this app?")
    elif record is not None and record.status is InvocationStatus.PAUSED:
        calls = client.calls(app_name, invocation_id)
        waiting = [c.function_call_id for c in calls if c.where == "waiting for an answer"]
        if calls and all(c.where == "answered" for c in calls):
            hint = (" Last seen paused with its calls answered: its resume is queued; is "
                    "`adk-celery orchestrator` running with this app?")
        else:
            open_calls = waiting or record.pending_calls
            # One call: its id in the command to run; several: a placeholder for one of them.
            call = open_calls[0] if len(open_calls) == 1 else "CALL_ID"
            hint = (f" Last seen paused, waiting for an answer to {', '.join(open_calls)}: "
                    f"answer with `adk-celery answer {app_name} {invocation_id} {call} "
                    "RESPONSE`, or use --until-paused to stop at a pause.")
    elif record is not None:
        hint = f" Last seen {record.status.value}."
    print(one_line(f"adk-celery: error: {error}{hint}"), file=sys.stderr)
    return 2


def exit_status(status: InvocationStatus | None) -> int:
    """1 for an invocation that failed or was cancelled, 0 otherwise (completed, paused)."""
    from orchestrator.distributed.models import InvocationStatus

    return 1 if status in (InvocationStatus.FAILED, InvocationStatus.CANCELLED) else 0


class EventPrinter:
    """Prints a live stream readably: one line per event, partial chunks inline, statuses.

    A committed event prints as ``author: text``, ``author: call name({args}) [id]`` or
    ``author: response name -> {response}``, one part after another; streaming chunks print
    their text as it comes, on a line of their own starting ``author ~``; a status change
    prints as ``[status]``, a remote call's progress as ``[progress tool [call id]: {...}]``.
    Text from agents, tools and users is printed through :func:`one_line`: a line printed is
    an item of the stream, never text posing as one, and nothing reaches the terminal as a
    control sequence.
    """

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._partial_author: str | None = None

    def print(self, item: StreamItem) -> None:
        """Print one stream item."""
        if item.event is not None and item.partial:
            self._chunk(item.event)
            return
        self.end_line()
        if item.event is not None:
            self._out.write(describe_event(item.event) + "\n")
        elif item.status is not None:
            self._out.write(f"[{item.status.value}]\n")
        elif item.progress is not None:
            progress = item.progress
            self._out.write(one_line(f"[progress {progress.tool} [{progress.function_call_id}]: "
                                     f"{_compact(progress.payload)}]") + "\n")
        self._out.flush()

    def end_line(self) -> None:
        """Finish a line of partial chunks, if one is open."""
        if self._partial_author is not None:
            self._out.write("\n")
            self._partial_author = None

    def _chunk(self, event: Event) -> None:
        parts = (event.content.parts or []) if event.content else []
        text = "".join(p.text for p in parts if p.text and not p.thought)
        if self._partial_author != event.author:
            self.end_line()
            self._out.write(f"{one_line(event.author)} ~ ")
            self._partial_author = event.author
        self._out.write(one_line(text))
        self._out.flush()


def describe_event(event: Event) -> str:
    """One readable line for a committed event (control characters escaped: :func:`one_line`)."""
    pieces: list[str] = []
    for part in (event.content.parts or []) if event.content else []:
        if part.function_call is not None:
            call = part.function_call
            running = " (long-running)" if call.id in (event.long_running_tool_ids or ()) else ""
            pieces.append(f"call {call.name}({_compact(call.args or {})}) [{call.id}]{running}")
        elif part.function_response is not None:
            response = part.function_response
            pieces.append(f"response {response.name} -> {_compact(response.response or {})}")
        elif part.text and not part.thought:
            pieces.append(part.text)
    if event.error_code or event.error_message:
        pieces.append(f"error {event.error_code}: {event.error_message}")
    if event.actions.state_delta:
        pieces.append(f"state {_compact(event.actions.state_delta)}")
    if event.actions.transfer_to_agent:
        pieces.append(f"transfer to {event.actions.transfer_to_agent}")
    return one_line(f"{event.author or '?'}: {' | '.join(pieces) or '(no content)'}")


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str) -> str:
    r"""``text`` with every character that is not printable escaped, as Python writes it.

    Newlines and carriage returns (``\n``, ``\r``), ESC (``\x1b``) and the other control
    and format characters (``\u202e``, ...): what a terminal would act on or show as more than
    one line. Printable text, in any script, is kept.
    """
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def _escape(char: str) -> str:
    code = ord(char)
    if char in _ESCAPES:
        return _ESCAPES[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _compact(value: Any) -> str:
    return json.dumps(value, default=str, separators=(", ", ": "))
