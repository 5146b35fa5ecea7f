"""``adk-celery`` commands for operators: look at invocations and sessions, answer, cancel.

Each command talks to Redis through a :class:`~workers.client.Client` and exits with a
status a script can test: 0 done, 1 the invocation failed or was cancelled (``follow``,
``enqueue --wait``), 2 a refused request, an unknown invocation, a missing setting or an
unreachable Redis, always with one line on stderr saying which.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from workers.client import Client

ENVIRONMENT = """environment:
  ADK_CELERY_REDIS_URL   Redis of the orchestrators and workers (required)
  ADK_CELERY_APPS        not needed here: these commands never load or run agents"""


def add_commands(sub: Any) -> None:
    """Add the operator commands to the ``adk-celery`` subparsers."""

    def command(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        # Raw, so the environment block keeps its lines; the description is wrapped here.
        return sub.add_parser(name, help=help_text, description=textwrap.fill(description, 79),
                              epilog=ENVIRONMENT,
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    status = command("status", "print an invocation's record and its pending calls as JSON",
                     "Print the invocation's record (status, error, pending calls) and where "
                     "each pending call stands: queued, running on which worker, retrying, or "
                     "waiting for an answer. Exits 2 if the invocation is unknown.")
    invocation_args(status)
    answer = command("answer", "answer a pending call of a paused invocation",
                     "Answer a call the invocation waits for (a human approval, another "
                     "service's result); the invocation resumes. RESPONSE is a JSON object.")
    invocation_args(answer)
    answer.add_argument("function_call_id", metavar="CALL_ID",
                        help="the pending call (see `status`)")
    answer.add_argument("response", metavar="RESPONSE",
                        help='JSON object, e.g. \'{"approved": true}\'; - reads it from stdin, '
                             "@FILE from FILE (for one longer than a command line takes)")
    cancel = command("cancel", "cancel an invocation (queued, running or paused)",
                     "Ask for the invocation to be cancelled; the orchestrator holding its "
                     "session records it. Prints the status it had when asked. Exits 2 if the "
                     "invocation is unknown or already finished (completed, failed or "
                     "cancelled).")
    invocation_args(cancel)
    sessions = command("sessions", "list a user's sessions (or every session of an app)",
                       "One line per session: id, user, last update (epoch seconds), and the "
                       "names of its state keys (sorted; a long list is cut, saying how many "
                       "more).")
    sessions.add_argument("app_name", metavar="APP", help="the app whose sessions to list")
    sessions.add_argument("user_id", metavar="USER", nargs="?", default=None,
                          help="only this user's sessions (default: every user's)")
    _invocations_command(command)


def _invocations_command(command: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    from orchestrator.distributed.invocation_lists import DEFAULT_LIMIT, MAX_LIMIT
    from orchestrator.distributed.models import InvocationStatus

    listing = command(
        "invocations", "list an app's invocations (by status) or a session's",
        "One line per invocation: id, status, user, session, created, updated (epoch "
        "seconds). With --user and --session: that session's invocations, newest first; "
        "without: the app's, latest updated first. A page holds --limit invocations; when "
        "more follow, stderr says which --cursor shows the next page.")
    listing.add_argument("--app", required=True, dest="app_name", help="the app (required)")
    listing.add_argument("--status", choices=[s.value for s in InvocationStatus], default=None,
                         help="only invocations in this status")
    listing.add_argument("--user", dest="user_id", default=None,
                         help="with --session: the user the session belongs to")
    listing.add_argument("--session", dest="session_id", default=None,
                         help="only this session's invocations (needs --user; exit status 2 "
                              "if the user has no such session)")
    listing.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                         help=f"invocations per page, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})")
    listing.add_argument("--cursor", default=None, help="the page after the one that said it")
    listing.add_argument("--json", action="store_true",
                         help='print the page as JSON: {"invocations": [...], "next_cursor": ...}')


def invocation_args(parser: argparse.ArgumentParser) -> None:
    """Add the positionals APP and INVOCATION_ID, described."""
    parser.add_argument("app_name", metavar="APP", help="the app the invocation runs in")
    parser.add_argument("invocation_id", metavar="INVOCATION_ID",
                        help="the invocation (the id `enqueue` printed, e-...)")


def run(args: argparse.Namespace) -> None:
    """Run an operator command (``args.command`` is one of :func:`add_commands`'s)."""
    commands: dict[str, Callable[[Client, argparse.Namespace], None]] = {
        "status": _status, "answer": _answer, "cancel": _cancel, "sessions": _sessions,
        "invocations": _invocations,
    }
    with_client(lambda client: commands[args.command](client, args))


def with_client(body: Callable[[Client], Any]) -> Any:
    """Run ``body`` with a Client, closed afterwards.

    A missing setting, an unreachable Redis, a Redis that refuses the connection's set-up or
    does not speak its protocol (a wrong database number, password or port) or a wait that
    timed out exits 2 with one line instead of a traceback, never saying the URL's password;
    a closed stdout (BrokenPipeError) goes on to the caller.
    """
    from config import get_settings
    from config.settings import NO_REDIS_URL

    if not get_settings().redis_url:  # as Client() says it, without importing it (seconds)
        fail(NO_REDIS_URL)
    import atexit
    import gc

    # Importing the client makes about 100,000 lasting objects (google-genai's types): the
    # collector's passes over them as they are made, and its last one at exit, cost about
    # 0.2 s and 0.4 s of a one-shot command. Frozen at exit, they are left to the process's
    # end (Python does not promise finalizers at exit anyway); the client is closed before.
    collecting = gc.isenabled()
    gc.disable()
    try:
        import redis

        from workers.client import Client
    finally:
        if collecting:
            gc.enable()
    atexit.unregister(gc.freeze)  # once, however many commands a process runs (tests)
    atexit.register(gc.freeze)

    try:
        client = Client()
    except RuntimeError as error:  # ADK_CELERY_REDIS_URL unset
        fail(str(error))
    try:
        return body(client)
    except BrokenPipeError:  # stdout's reader went away: not Redis (see workers.cli.main)
        raise
    except TimeoutError as error:  # a wait that gave up, not a connection (an OSError too)
        fail(str(error))
    except (redis.ConnectionError, redis.TimeoutError, OSError) as error:
        fail(_without_password(f"cannot reach Redis ({type(error).__name__}: {error}); is it "
                               "running, and is ADK_CELERY_REDIS_URL right?"))
    except redis.RedisError as error:  # DB index out of range, not Redis at that port, ...
        fail(_without_password(f"Redis error ({type(error).__name__}: {error}); is "
                               "ADK_CELERY_REDIS_URL right (the host and port of a Redis server, "
                               "its database number, user and password)?"))
    finally:
        client.close()


def _without_password(text: str) -> str:
    """``text`` with the password of ADK_CELERY_REDIS_URL, if any, masked."""
    from urllib.parse import unquote, urlsplit

    from config import get_settings

    try:
        password = urlsplit(get_settings().redis_url or "").password
    except ValueError:
        password = None
    for secret in {password, unquote(password)} if password else ():
        text = text.replace(secret, "***")
    return text


def argument_text(value: str, name: str) -> str:
    """A command-line argument as given, or read from stdin (``-``) or a file (``@FILE``).

    Exits 2 with one line naming ``name`` if it cannot be read, or if it holds more than
    ``ADK_CELERY_MAX_PAYLOAD_BYTES``: no more than that is read (``@/dev/zero`` took a
    gigabyte in seconds), as no more would be taken.
    """
    from config import get_settings

    if value == "-":
        source = "stdin"
    elif value.startswith("@"):
        source = repr(value[1:])
    else:
        return value
    limit = get_settings().max_payload_bytes
    try:
        if value == "-":
            text = sys.stdin.read(limit + 1)
        else:
            with open(value[1:], encoding="utf-8") as file:
                text = file.read(limit + 1)
        if len(text) > limit:  # each character is one byte or more
            fail(f"{name}: {source} holds more than {limit} bytes, the limit "
                 "(ADK_CELERY_MAX_PAYLOAD_BYTES).")
        return text
    except UnicodeDecodeError:
        fail(f"{name}: {source} is not UTF-8 text.")
    except OSError as error:
        fail(f"{name}: cannot read {source} ({error.strerror or error}).")


JSON_TYPES = {type(None): "null", bool: "true or false", int: "a number", float: "a number",
              str: "a string", list: "an array"}
"""How a response that is not a JSON object is named in the error, in JSON's words."""


def fail(message: str) -> NoReturn:
    """Print ``adk-celery: error: message`` on stderr and exit with status 2."""
    print(f"adk-celery: error: {message}", file=sys.stderr)
    sys.exit(2)


def require_invocation(client: Client, app_name: str, invocation_id: str) -> Any:
    """The invocation's record; exits 2 at once if there is none."""
    from orchestrator.errors import no_invocation_text

    record = client.status(app_name, invocation_id)
    if record is None:
        fail(no_invocation_text(app_name, invocation_id))
    return record


def _status(client: Client, args: argparse.Namespace) -> None:
    record = require_invocation(client, args.app_name, args.invocation_id)
    shown = record.model_dump(mode="json")
    shown["calls"] = [call.model_dump(mode="json", exclude_none=True)
                      for call in client.calls(args.app_name, args.invocation_id)]
    print(json.dumps(shown, indent=2))


def _answer(client: Client, args: argparse.Namespace) -> None:
    text = argument_text(args.response, "response")
    try:
        response = json.loads(text)
    except ValueError as error:
        fail(f"response: not JSON ({error}).")
    except RecursionError:  # deeper than the parser goes, let alone the limit
        from config import get_settings

        fail(f"response: nests too deep (the limit is {get_settings().max_nesting_depth} levels, "
             "ADK_CELERY_MAX_NESTING_DEPTH).")
    if not isinstance(response, dict):
        fail(f"response: must be a JSON object, not {JSON_TYPES.get(type(response), 'that')}.")
    require_invocation(client, args.app_name, args.invocation_id)
    client.answer(args.app_name, args.invocation_id, args.function_call_id, response)
    print(f"answered {args.function_call_id}")


def _cancel(client: Client, args: argparse.Namespace) -> None:
    # Unknown or finished (as the API's 404 and 409): the Client raises, main says it, exit 2.
    status = client.cancel(args.app_name, args.invocation_id)
    print(f"cancel requested for {args.invocation_id} (it was {status.value})")


def _sessions(client: Client, args: argparse.Namespace) -> None:
    for session in client.list_sessions(args.app_name, args.user_id):
        print(f"{session.id}\t{session.user_id}\t{session.last_update_time:.3f}\t"
              f"{state_keys(session.state)}")


KEYS_WIDTH = 60
"""About how many characters of state key names ``sessions`` prints per session."""


def state_keys(state: dict[str, Any]) -> str:
    """The state's keys, sorted and comma-separated, cut near :data:`KEYS_WIDTH` characters."""
    from workers.cli_follow import one_line

    names = sorted(state)
    if not names:
        return "(no state)"
    shown: list[str] = []
    for name in names:
        if shown and len(", ".join([*shown, name])) > KEYS_WIDTH:
            break
        shown.append(name if len(name) <= KEYS_WIDTH else name[:KEYS_WIDTH - 3] + "...")
    more = f", ... (+{len(names) - len(shown)} more)" if len(shown) < len(names) else ""
    return one_line(", ".join(shown) + more)


def _invocations(client: Client, args: argparse.Namespace) -> None:
    if (args.user_id is None) != (args.session_id is None):
        fail("--user and --session go together: a session belongs to one user.")
    page = client.invocations(args.app_name, status=args.status, user_id=args.user_id,
                              session_id=args.session_id, limit=args.limit, cursor=args.cursor)
    if args.session_id is not None and not page.records and args.session_id not in {
            session.id for session in client.list_sessions(args.app_name, args.user_id)}:
        fail(f"session {args.session_id!r} of app {args.app_name!r}, user {args.user_id!r} "
             "not found.")
    if args.json:
        print(json.dumps({"invocations": [r.model_dump(mode="json", exclude={"new_message", "state_delta"})
                                          for r in page.records],
                          "next_cursor": page.next_cursor}, indent=2))
        return
    for record in page.records:
        print(f"{record.invocation_id}\t{record.status.value}\t{record.user_id}\t"
              f"{record.session_id}\t{record.created_at:.3f}\t{record.updated_at:.3f}")
    if page.next_cursor is not None:
        print(f"adk-celery: more invocations: --cursor {page.next_cursor}", file=sys.stderr)
