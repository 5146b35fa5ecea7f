"""How ``/run`` and ``/run_sse`` follow a run: to its end, or to a pause for an outside answer.

A run ends when its invocation ends, or pauses for an answer from outside (a human's, another
service's). A pause while workers run its remote tools is not an end, as a long-running tool
that returns a value does not end ADK's run either. Which of the two a pause is can only be
seen in Redis (jobs out, answers stored), so a run that pauses looks once (one round trip),
keeps following meanwhile, and looks again each :data:`_RECHECK_SECONDS` that nothing
happens: a tool on a worker may finish and leave its call to an outside answer.

The events go out as the live stream holds them (ADK's wire JSON), with no parse into an
``Event`` and back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from workers.api.backend import Backend

_RECHECK_SECONDS = 1.0
"""While paused on calls that workers run, how often a run looks again whether the
invocation now waits for an answer from outside (a tool that returned nothing)."""


async def run_events(backend: Backend, record: InvocationRecord, *, partial: bool,
                     after: str | None = None) -> AsyncIterator[dict[str, Any] | Exception]:
    """The run's events (wire JSON, without the user's message, as ADK's runner), then its end.

    ``partial``: streaming chunks too. ``after``: follow after that stream entry (a resumed
    run). A failed invocation ends with a RuntimeError (yielded) saying why.
    """
    hub = await backend.hub()
    async with hub.watch(record.app_name, record.invocation_id, after) as watch:
        pause: InvocationRecord | None = None  # the pause the stream ends with, if it does
        while True:
            try:
                items, at_end = await watch.read(_RECHECK_SECONDS if pause is not None else None)
            except TimeoutError:  # still paused, and nothing came: look again
                items, at_end = [], True
            for item in items:
                if item.kind == "progress":  # a tool's report changes nothing of the pause
                    continue
                pause = None
                wire = item.wire
                if wire is not None:
                    if wire.get("author") != "user" and (partial or not item.partial):
                        yield wire
                elif item.status is InvocationStatus.FAILED:
                    final = item.record or await backend.record(record.app_name, record.invocation_id)
                    yield RuntimeError(final.error or "the invocation failed")
                    return
                elif item.status is not None and item.status.is_terminal:
                    return
                elif item.status is InvocationStatus.PAUSED:
                    pause = item.record or await backend.record(record.app_name, record.invocation_id)
            if pause is not None and at_end and await _waits_for_outside(backend, pause):
                return


async def _waits_for_outside(backend: Backend, pause: InvocationRecord) -> bool:
    services = await backend.services()
    return await services.store.waits_for_outside(pause)
