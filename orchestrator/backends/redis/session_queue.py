"""RedisSessionQueue: per-session work queues and leases in Redis (distributed mode).

Leases carry strictly increasing fencing tokens; while an orchestrator works on a session,
every append checks that it still holds the lease with its token, so a holder that lost
the lease (it stalled past the TTL and another took over) cannot write. Each push also posts
a wake-up on the orchestrators' wake stream, in the same round trip (the scripts are in
:mod:`.session_queue_scripts`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

from orchestrator import failpoints
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.codec import pairs_to_dict
from orchestrator.backends.redis.invocation_scripts import put_result_operands, save_record_operands
from orchestrator.backends.redis.invocation_store import loaded_from
from orchestrator.backends.redis.jobs import watch_member
from orchestrator.backends.redis.session_queue_scripts import (
    CLAIM_OR_RELEASE,
    CREATE_AND_PUSH,
    CREATE_AND_PUSH_IF_SESSION,
    PUSH,
    PUT_ANSWERS_AND_PUSH,
    PUT_RESULT_AND_PUSH,
    RELEASE,
    RENEW,
    TAKE,
    ClaimOrRelease,
    CreateAndPush,
    CreateAndPushIfSession,
    LeaseToken,
    PushItem,
    PutAnswersAndPush,
    PutResultAndPush,
    TakeSession,
)
from orchestrator.backends.redis.session_reads import (
    first_unread,
    session_after,
    session_from_replies,
    session_read_keys,
)
from orchestrator.backends.redis.wakeups import RedisWakeups
from orchestrator.distributed.models import InvocationRecord, ToolResult, WorkItem
from orchestrator.distributed.stores import SessionKey, Taken, in_flight
from orchestrator.errors import StaleSessionError
from orchestrator.sessions.session import Session


class RedisSessionQueue:
    """Per-session work queues (reliable: claimed items sit in a processing list) and leases."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        lease_ttl_seconds: float = 30.0,
        wakeups: RedisWakeups | None = None,
        record_ttl_seconds: int = 7 * 24 * 3600,
        job_watch_key: str = keys.job_watch("adk.invocations"),
    ) -> None:
        self._redis = client
        self._job_watch_key = job_watch_key
        """The watch index a stored result takes its call out of."""
        self._ttl_ms = int(lease_ttl_seconds * 1000)
        self._record_ttl = record_ttl_seconds
        """TTL of the records :meth:`claim_or_release` saves (as the store's)."""
        self._wakeups = wakeups
        """Where each push announces itself to orchestrators (None: the caller drains)."""
        self._take = TAKE.register(client)
        self._push = PUSH.register(client)
        self._put_result_and_push = PUT_RESULT_AND_PUSH.register(client)
        self._put_answers_and_push = PUT_ANSWERS_AND_PUSH.register(client)
        self._create_and_push = CREATE_AND_PUSH.register(client)
        self._create_and_push_if_session = CREATE_AND_PUSH_IF_SESSION.register(client)
        self._renew = RENEW.register(client)
        self._release = RELEASE.register(client)
        self._claim_or_release = CLAIM_OR_RELEASE.register(client)

    async def push(self, key: SessionKey, item: WorkItem, result: ToolResult | None = None) -> bool:
        """Append an item, and post a wake-up for it in the same round trip.

        With ``result`` (a call's result, stored as :meth:`RedisInvocationStore.put_result`
        does), one script stores it and pushes only if it was stored.
        """
        failpoints.hit("queue.push")
        push = self._push_fields(key, item)
        if result is not None:
            stored = put_result_operands(key[0], item.invocation_id, result,
                                         watch=self._job_watch_key, ttl=self._record_ttl)
            return bool(await self._put_result_and_push(
                PutResultAndPush(**stored.field_values(), **push)))
        return bool(await self._push(PushItem(**push)))

    async def create_and_push(self, key: SessionKey, record: InvocationRecord, item: WorkItem) -> bool:
        """Store a new record and push its first item (with its wake-up) in one script.

        False, nothing written, if the record existed (then its item was queued with it).
        """
        return bool(await self._create_and_push(CreateAndPush(**self._create_fields(key, record, item))))

    async def push_answers(
        self, key: SessionKey, item: WorkItem, results: Sequence[ToolResult]
    ) -> str | None:
        """Store every result and append the item in one script, all or nothing.

        None when done; else the id of a call whose result could not be stored (it has a
        final one already), and nothing was written.
        """
        failpoints.hit("queue.push")
        app_name, invocation_id = key[0], item.invocation_id
        refused = await self._put_answers_and_push(PutAnswersAndPush(
            **self._push_fields(key, item), results=keys.invocation_results(app_name, invocation_id),
            watch=self._job_watch_key, jobs=keys.invocation_jobs(app_name, invocation_id),
            ttl=self._record_ttl,
            call_ids=[r.function_call_id for r in results],
            answers=[r.model_dump_json() for r in results],
            members=[watch_member(app_name, invocation_id, r.function_call_id) for r in results]))
        return str(refused) or None

    def queue_create_and_push(self, pipe: Any, record: InvocationRecord, item: WorkItem, *,
                              session_must_exist: bool = False) -> None:
        """Add to a pipeline: store ``record`` unless it exists and, if stored, push ``item``.

        Its reply is 1 if the record was new (the item is queued), else 0; with
        ``session_must_exist``, -1 (nothing written) if the record's session does not exist.
        The scripts are called by their sha: load :attr:`create_and_push_script_sources`
        after Redis forgot them.
        """
        key = (record.app_name, record.user_id, record.session_id)
        fields = self._create_fields(key, record, item)
        if session_must_exist:
            self._create_and_push_if_session.queue(
                pipe, CreateAndPushIfSession(**fields, session_meta=keys.session(*key)))
        else:
            self._create_and_push.queue(pipe, CreateAndPush(**fields))

    @property
    def create_and_push_script_sources(self) -> list[str]:
        """The Lua sources :meth:`queue_create_and_push` calls by sha (to ``SCRIPT LOAD``)."""
        return [CREATE_AND_PUSH.source, CREATE_AND_PUSH_IF_SESSION.source]

    def _create_fields(self, key: SessionKey, record: InvocationRecord, item: WorkItem) -> dict[str, Any]:
        """The :class:`CreateAndPush` fields: ``record`` saved if new, ``item`` pushed with it."""
        return {**save_record_operands(record, self._record_ttl).field_values(),
                **self._push_fields(key, item)}

    def _push_fields(self, key: SessionKey, item: WorkItem) -> dict[str, Any]:
        """The :class:`PushItem` fields pushing ``item`` on ``key``'s queue, with its wake-up."""
        fields: dict[str, Any] = {"queue": keys.session_queue(*key), "item": item.model_dump_json()}
        if self._wakeups is not None:
            fields.update(wake=self._wakeups.stream_key, app=key[0], user=key[1], session=key[2],
                          invocation=item.invocation_id)
        return fields

    async def take(
        self, key: SessionKey, hint: str | None = None, known: Session | None = None
    ) -> Taken | None:
        """Acquire the lease and claim the first item in one round trip (see SessionQueue).

        With ``hint`` (the invocation the wake-up announced) the same script also reads that
        invocation and its session, right after the claim, and they are returned if the item
        is one of the hinted invocation's. One script costs the client far less than the
        same reads as a pipeline. With ``known``, the script reads the events from the last
        of ``known``'s on: if that one is still there, only the newer ones are parsed.
        """
        hinted: dict[str, Any] = {}
        if hint:
            meta, state, app_state, user_state, events = session_read_keys(*key)
            hinted = {"record_key": keys.invocation(key[0], hint),
                      "cancel": keys.cancel_flag(key[0], hint),
                      "results": keys.invocation_results(key[0], hint), "meta": meta,
                      "state": state, "app_state": app_state, "user_state": user_state,
                      "events": events}
        reply = await self._take(TakeSession(
            lease=keys.session_lease(*key), fence=keys.fence_counter(*key),
            processing=keys.session_processing(*key), queue=keys.session_queue(*key), **hinted,
            held=keys.session_held(*key), busy=keys.session_busy(*key),
            taker=keys.session_lease_taker(*key), taker_id=uuid.uuid4().hex,
            ttl_ms=self._ttl_ms, hint=hint or "", first_event=first_unread(known)))
        if not reply:
            return None
        token = str(reply[0])
        if len(reply) < 2:
            return Taken(token, None, None)
        item = WorkItem.from_stored(reply[1])
        if len(reply) < 3:
            return Taken(token, item, None)
        raw, cancelled, results, meta, state, app_state, user_state, events = reply[2:]
        loaded = loaded_from(raw or None, cancelled, pairs_to_dict(results))
        hashes = [pairs_to_dict(raw_hash) for raw_hash in (meta, state, app_state, user_state)]
        if known is None:
            return Taken(token, item, loaded._replace(session=session_from_replies(
                *key, [*hashes, events])))
        same, session = session_after(known, hashes, events)
        # Not the session ``known`` was: no session here, the caller reads it whole.
        return Taken(token, item, loaded._replace(session=session) if same else loaded)

    async def renew(self, key: SessionKey, token: str) -> bool:
        """Extend the lease if still held."""
        return bool(await self._renew(LeaseToken(lease=keys.session_lease(*key), token=token,
                                                 ttl_ms=self._ttl_ms)))

    async def release(self, key: SessionKey, token: str) -> None:
        """Free the lease if still held with ``token``."""
        await self._release(LeaseToken(lease=keys.session_lease(*key), token=token))

    async def claim_or_release(
        self,
        key: SessionKey,
        token: str,
        finished: WorkItem | None = None,
        save: InvocationRecord | None = None,
    ) -> WorkItem | None:
        """Save ``save``, then the next item, or (atomically) release the lease: one script.

        StaleSessionError (nothing written) if the lease was lost.
        """
        saved: dict[str, Any] = {}
        if save is not None:
            saved = {**save_record_operands(save, self._record_ttl).field_values(),
                     "invocation": save.invocation_id, "in_flight": "1" if in_flight(save) else ""}
        raw = await self._claim_or_release(ClaimOrRelease(
            processing=keys.session_processing(*key), queue=keys.session_queue(*key),
            lease=keys.session_lease(*key), held=keys.session_held(*key),
            busy=keys.session_busy(*key), **saved,
            finished=finished.stored_json() if finished is not None else "", token=token))
        if raw == -1:
            raise StaleSessionError(f"Lost the lease of session {key!r}: its record is not saved.")
        return WorkItem.from_stored(raw) if raw else None

