"""A model call retried after its run stopped answers under the id its lost chunks carry.

With streaming, each answer's partial chunks reach the live stream as they come, and the
committed answer carries their id (clients such as google-adk's web UI show the chunks and
the answer of one id as one message, the answer replacing the chunks). When the run stops
mid-answer (its orchestrator killed), its chunks stay on the stream and the run that
recovers the invocation calls the model again. Given the id of the stopped run's chunks,
that call's chunks and answer carry the same id: a follower's message is replaced by the
new answer instead of a second one appearing beside the cut-off first.

The recovering side reads the ids (``EventStream.abandoned_chunks``) and hands them to the
run with :func:`answering_as`; each agent's first model call in its branch takes its own
(once) with :func:`answer_id_for`. The ids are never in the log (only chunks carried them),
so they never collide with a committed event.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar

AnswerKey = tuple[str, str | None]
"""Whose answer: (the agent's name, its branch)."""

_IDS: ContextVar[dict[AnswerKey, str] | None] = ContextVar("adk_celery_retried_answers", default=None)


@contextlib.contextmanager
def answering_as(ids: Mapping[AnswerKey, str]) -> Iterator[None]:
    """Within the block, each agent's next model call answers under its abandoned id, if any.

    The mapping is shared by the tasks started inside the block (a ParallelAgent's branches
    in process): each key is taken once, whichever task takes it.
    """
    token = _IDS.set(dict(ids) if ids else None)
    try:
        yield
    finally:
        _IDS.reset(token)


def answer_id_for(agent_name: str, branch: str | None) -> str | None:
    """The id the next answer of ``agent_name`` in ``branch`` takes over (once), or None."""
    ids = _IDS.get()
    if not ids:
        return None
    return ids.pop((agent_name, branch), None)
