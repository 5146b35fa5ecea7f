"""A service that knows nothing of this project: plain Celery ``send_task`` by task name.

Run as ``python -I tests/support/send_task_client.py '<json spec>'`` where the spec is
``{"redis_url": ..., "queue": ..., "timeout": ..., "messages": [<kwargs>, ...]}``. Each
message is sent as ``adk_celery.invoke`` with those JSON keyword arguments; the task's result
(``{"invocation_id", "session_id"}`` or ``{"error"}``, or ``{"failed": <the task's exception>}``
for a message the orchestrators refused) is printed as one JSON line per message.
It imports only ``celery`` (and the standard library) and checks that it did.
"""

import json
import sys

from celery import Celery


def main() -> None:
    """Send every message of the spec and print each task result as a JSON line."""
    spec = json.loads(sys.argv[1])
    app = Celery("plain-client", broker=spec["redis_url"], backend=spec["redis_url"])
    app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"],
                    result_accept_content=["json"])
    results = [app.send_task("adk_celery.invoke", kwargs=kwargs, queue=spec["queue"])
               for kwargs in spec["messages"]]
    for result in results:
        value = result.get(timeout=spec["timeout"], propagate=False)
        if isinstance(value, BaseException):
            value = {"failed": f"{type(value).__name__}: {value}"}
        print(json.dumps(value), flush=True)
    leaked = sorted(name for name in ("orchestrator", "workers", "google", "config", "tools")
                    if name in sys.modules)
    assert not leaked, f"the plain client imported project or google modules: {leaked}"
    print(json.dumps({"modules_checked": True}), flush=True)


if __name__ == "__main__":
    main()
