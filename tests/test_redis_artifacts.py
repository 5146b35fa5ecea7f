"""RedisArtifactService beyond the shared contract (tests/test_artifacts.py runs that too)."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from google.genai import types
from redis.exceptions import ResponseError

from orchestrator import RedisArtifactService
from orchestrator.backends.redis import keys as redis_keys

APP, USER, SID = "app", "u1", "s1"


@pytest.fixture
def service(redis_client) -> RedisArtifactService:
    return RedisArtifactService(client=redis_client)


async def test_canonical_uris_use_the_redis_scheme(service):
    await service.save_artifact(
        app_name=APP, user_id=USER, session_id=SID, filename="a.txt", artifact=types.Part(text="x")
    )
    for _ in range(2):
        await service.save_artifact(
            app_name=APP, user_id=USER, filename="user:b.txt", artifact=types.Part(text="y")
        )
    a = await service.get_artifact_version(
        app_name=APP, user_id=USER, session_id=SID, filename="a.txt"
    )
    b = await service.get_artifact_version(app_name=APP, user_id=USER, filename="user:b.txt")
    assert a is not None and b is not None
    assert a.canonical_uri == "redis://apps/app/users/u1/sessions/s1/artifacts/a.txt/versions/0"
    assert b.canonical_uri == "redis://apps/app/users/u1/artifacts/user:b.txt/versions/1"


async def test_storage_layout(service, redis_client):
    data = bytes(range(256))
    await service.save_artifact(
        app_name=APP, user_id=USER, session_id=SID, filename="blob.bin",
        artifact=types.Part.from_bytes(data=data, mime_type="a/b"), custom_metadata={"k": [1]},
    )
    parts = await redis_client.lrange(redis_keys.artifact_parts(APP, USER, SID, "blob.bin"), 0, -1)
    metas = await redis_client.lrange(redis_keys.artifact_meta(APP, USER, SID, "blob.bin"), 0, -1)
    assert len(parts) == len(metas) == 1
    assert base64.urlsafe_b64decode(json.loads(parts[0])["inline_data"]["data"]) == data
    meta = json.loads(metas[0])
    assert meta["customMetadata"] == {"k": [1]} and meta["mimeType"] == "a/b"
    names = await redis_client.smembers(redis_keys.artifact_names(APP, USER, SID))
    assert names == {"blob.bin"}


async def test_two_instances_share_artifacts_and_get_distinct_versions(redis_url, redis_client):
    one, two = RedisArtifactService(redis_url), RedisArtifactService(redis_url)
    try:
        saves = [
            svc.save_artifact(
                app_name=APP, user_id=USER, filename="user:log", artifact=types.Part(text=str(i))
            )
            for i in range(20)
            for svc in (one, two)
        ]
        versions = await asyncio.gather(*saves)
        assert sorted(versions) == list(range(40))  # distinct and gap-free
        assert await two.list_versions(app_name=APP, user_id=USER, filename="user:log") == list(
            range(40)
        )
        latest = await one.load_artifact(app_name=APP, user_id=USER, filename="user:log")
        assert latest is not None and latest.text is not None
        await one.delete_artifact(app_name=APP, user_id=USER, filename="user:log")
        assert await two.list_artifact_keys(app_name=APP, user_id=USER) == []
    finally:
        await one.aclose()
        await two.aclose()


async def test_non_json_custom_metadata_is_rejected_naming_the_key(service, redis_client):
    with pytest.raises(TypeError, match="'when'"):
        await service.save_artifact(
            app_name=APP, user_id=USER, session_id=SID, filename="a.txt",
            artifact=types.Part(text="x"), custom_metadata={"ok": 1, "when": object()},
        )
    assert await redis_client.keys("*") == []


async def test_failed_save_writes_nothing(service, redis_client):
    names = redis_keys.artifact_names(APP, USER, SID)
    await redis_client.set(names, "wrong type")
    with pytest.raises(ResponseError, match="nothing was written"):
        await service.save_artifact(
            app_name=APP, user_id=USER, session_id=SID, filename="a.txt",
            artifact=types.Part(text="x"),
        )
    assert await redis_client.keys("*") == [names]


async def test_a_rewind_tombstone_loads_as_absent(service):
    from orchestrator.artifacts.artifact_util import new_rewind_tombstone

    where = {"app_name": "app", "user_id": "u", "session_id": "s", "filename": "f.txt"}
    await service.save_artifact(artifact=types.Part(text="kept"), **where)
    assert await service.save_artifact(artifact=new_rewind_tombstone(), **where) == 1
    assert await service.load_artifact(**where) is None
    assert (await service.load_artifact(version=0, **where)).text == "kept"
