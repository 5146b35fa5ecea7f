"""Contract tests for artifact services (ADK reference §5.1).

Every test goes through the ``artifact_service`` fixture, so another implementation (e.g. a
Redis-backed one) is covered by adding it to the fixture's ``params``.
"""

from __future__ import annotations

import pytest
from google.genai import types

from orchestrator.artifacts import (
    ArtifactVersion,
    BaseArtifactService,
    InMemoryArtifactService,
    RedisArtifactService,
)
from orchestrator.errors import InputValidationError

APP = "app"
USER = "u1"
SID = "s1"


@pytest.fixture(
    params=[InMemoryArtifactService, RedisArtifactService], ids=lambda cls: cls.__name__
)
def artifact_service(request: pytest.FixtureRequest) -> BaseArtifactService:
    if request.param is RedisArtifactService:
        return RedisArtifactService(client=request.getfixturevalue("redis_client"))
    return request.param()


def text(value: str) -> types.Part:
    return types.Part(text=value)


async def save(
    service: BaseArtifactService,
    filename: str,
    artifact: types.Part | dict,
    *,
    session_id: str | None = SID,
    user_id: str = USER,
    app_name: str = APP,
    custom_metadata: dict | None = None,
) -> int:
    return await service.save_artifact(
        app_name=app_name,
        user_id=user_id,
        session_id=session_id,
        filename=filename,
        artifact=artifact,
        custom_metadata=custom_metadata,
    )


async def load(
    service: BaseArtifactService,
    filename: str,
    *,
    session_id: str | None = SID,
    user_id: str = USER,
    app_name: str = APP,
    version: int | None = None,
) -> types.Part | None:
    return await service.load_artifact(
        app_name=app_name,
        user_id=user_id,
        session_id=session_id,
        filename=filename,
        version=version,
    )


# --- versioning ---------------------------------------------------------------------------


async def test_versions_start_at_zero_and_increment(artifact_service: BaseArtifactService):
    assert [await save(artifact_service, "a.txt", text(f"v{i}")) for i in range(3)] == [0, 1, 2]
    # Versions are per file.
    assert await save(artifact_service, "b.txt", text("other")) == 0


async def test_load_latest_and_explicit_version(artifact_service: BaseArtifactService):
    for i in range(3):
        await save(artifact_service, "a.txt", text(f"v{i}"))
    assert await load(artifact_service, "a.txt") == text("v2")
    assert await load(artifact_service, "a.txt", version=0) == text("v0")
    assert await load(artifact_service, "a.txt", version=1) == text("v1")
    assert await load(artifact_service, "a.txt", version=2) == text("v2")


async def test_missing_artifact_or_version_is_none(artifact_service: BaseArtifactService):
    assert await load(artifact_service, "nope.txt") is None
    assert await load(artifact_service, "user:nope.txt") is None
    await save(artifact_service, "a.txt", text("v0"))
    assert await load(artifact_service, "a.txt", version=1) is None
    assert await load(artifact_service, "a.txt", version=-1) is None
    kwargs = {"app_name": APP, "user_id": USER, "session_id": SID}
    assert await artifact_service.get_artifact_version(**kwargs, filename="nope.txt") is None
    assert (
        await artifact_service.get_artifact_version(**kwargs, filename="a.txt", version=5)
        is None
    )
    assert await artifact_service.list_versions(**kwargs, filename="nope.txt") == []
    assert await artifact_service.list_artifact_versions(**kwargs, filename="nope.txt") == []


# --- scoping ------------------------------------------------------------------------------


async def test_user_scope_is_shared_across_sessions(artifact_service: BaseArtifactService):
    assert await save(artifact_service, "user:profile", text("p0"), session_id="s1") == 0
    # A save from another session (or with no session) continues the same version line.
    assert await save(artifact_service, "user:profile", text("p1"), session_id="s2") == 1
    assert await save(artifact_service, "user:profile", text("p2"), session_id=None) == 2
    for sid in ("s1", "s2", "s3", None):
        assert await load(artifact_service, "user:profile", session_id=sid) == text("p2")
    assert await load(artifact_service, "user:profile", session_id="s9", version=0) == text("p0")


async def test_session_scope_is_isolated(artifact_service: BaseArtifactService):
    await save(artifact_service, "notes.txt", text("in s1"), session_id="s1")
    assert await load(artifact_service, "notes.txt", session_id="s2") is None
    assert await save(artifact_service, "notes.txt", text("in s2"), session_id="s2") == 0
    assert await load(artifact_service, "notes.txt", session_id="s1") == text("in s1")
    assert await load(artifact_service, "notes.txt", session_id="s2") == text("in s2")


async def test_users_and_apps_are_isolated(artifact_service: BaseArtifactService):
    await save(artifact_service, "user:x", text("u1"), user_id="u1")
    await save(artifact_service, "f", text("u1"), user_id="u1")
    assert await load(artifact_service, "user:x", user_id="u2") is None
    assert await load(artifact_service, "f", user_id="u2") is None
    assert await load(artifact_service, "user:x", app_name="other") is None
    assert await artifact_service.list_artifact_keys(
        app_name=APP, user_id="u2", session_id=SID
    ) == []


@pytest.mark.parametrize(
    "call",
    [
        "save_artifact",
        "load_artifact",
        "delete_artifact",
        "list_versions",
        "list_artifact_versions",
        "get_artifact_version",
    ],
)
@pytest.mark.parametrize("session_id", [None, ""])
async def test_session_file_without_session_id_is_rejected(
    artifact_service: BaseArtifactService, call: str, session_id: str | None
):
    kwargs: dict = {
        "app_name": APP, "user_id": USER, "filename": "report.pdf", "session_id": session_id,
    }
    if call == "save_artifact":
        kwargs["artifact"] = text("x")
    with pytest.raises(InputValidationError) as excinfo:
        await getattr(artifact_service, call)(**kwargs)
    message = str(excinfo.value)
    assert "report.pdf" in message
    assert "session_id" in message
    assert "user:" in message  # tells the caller how to make it user-scoped
    assert isinstance(excinfo.value, ValueError)


# --- listing and metadata -----------------------------------------------------------------


async def test_list_artifact_keys(artifact_service: BaseArtifactService):
    await save(artifact_service, "zeta.txt", text("z"))
    await save(artifact_service, "alpha.txt", text("a"))
    await save(artifact_service, "alpha.txt", text("a2"))
    await save(artifact_service, "user:prefs", text("p"))
    await save(artifact_service, "other-session.txt", text("o"), session_id="s2")

    keys = await artifact_service.list_artifact_keys(app_name=APP, user_id=USER, session_id=SID)
    assert keys == ["alpha.txt", "user:prefs", "zeta.txt"]
    keys2 = await artifact_service.list_artifact_keys(
        app_name=APP, user_id=USER, session_id="s2"
    )
    assert keys2 == ["other-session.txt", "user:prefs"]
    # Without a session only user-scoped files are visible.
    assert await artifact_service.list_artifact_keys(app_name=APP, user_id=USER) == [
        "user:prefs"
    ]


async def test_list_versions_and_metadata(artifact_service: BaseArtifactService):
    await save(artifact_service, "a.txt", text("v0"), custom_metadata={"k": 0})
    await save(
        artifact_service,
        "a.txt",
        types.Part.from_bytes(data=b"\x89PNG", mime_type="image/png"),
        custom_metadata={"k": 1, "nested": {"x": [1, 2]}},
    )
    await save(artifact_service, "a.txt", text("v2"))
    kwargs = {"app_name": APP, "user_id": USER, "session_id": SID, "filename": "a.txt"}

    assert await artifact_service.list_versions(**kwargs) == [0, 1, 2]
    infos = await artifact_service.list_artifact_versions(**kwargs)
    assert [i.version for i in infos] == [0, 1, 2]
    assert all(isinstance(i, ArtifactVersion) for i in infos)
    assert [i.mime_type for i in infos] == ["text/plain", "image/png", "text/plain"]
    assert [i.custom_metadata for i in infos] == [
        {"k": 0}, {"k": 1, "nested": {"x": [1, 2]}}, {},
    ]
    assert all(i.canonical_uri.endswith(f"/a.txt/versions/{i.version}") for i in infos)
    assert len({i.canonical_uri for i in infos}) == 3
    assert all(isinstance(i.create_time, float) for i in infos)
    assert infos[0].create_time <= infos[1].create_time <= infos[2].create_time

    latest = await artifact_service.get_artifact_version(**kwargs)
    assert latest is not None and latest.version == 2
    first = await artifact_service.get_artifact_version(**kwargs, version=0)
    assert first == infos[0]


async def test_in_memory_canonical_uris():
    service = InMemoryArtifactService()
    await save(service, "a.txt", text("x"))
    await save(service, "user:b.txt", text("x"))
    await save(service, "user:b.txt", text("y"))
    a = await service.get_artifact_version(
        app_name=APP, user_id=USER, session_id=SID, filename="a.txt"
    )
    b = await service.get_artifact_version(
        app_name=APP, user_id=USER, session_id=SID, filename="user:b.txt"
    )
    assert a is not None and b is not None
    assert a.canonical_uri == "memory://apps/app/users/u1/sessions/s1/artifacts/a.txt/versions/0"
    assert b.canonical_uri == "memory://apps/app/users/u1/artifacts/user:b.txt/versions/1"


async def test_artifact_version_serialises_camel_case(artifact_service: BaseArtifactService):
    await save(artifact_service, "a.txt", text("x"), custom_metadata={"k": "v"})
    info = await artifact_service.get_artifact_version(
        app_name=APP, user_id=USER, session_id=SID, filename="a.txt"
    )
    assert info is not None
    dumped = info.model_dump(by_alias=True)
    assert set(dumped) == {"version", "canonicalUri", "customMetadata", "createTime", "mimeType"}
    assert ArtifactVersion.model_validate(dumped) == info
    assert ArtifactVersion.model_validate(info.model_dump()) == info  # snake_case accepted


# --- delete -------------------------------------------------------------------------------


async def test_delete_artifact(artifact_service: BaseArtifactService):
    await save(artifact_service, "a.txt", text("v0"))
    await save(artifact_service, "a.txt", text("v1"))
    await save(artifact_service, "keep.txt", text("k"))
    await save(artifact_service, "user:u.txt", text("u"))
    kwargs = {"app_name": APP, "user_id": USER, "session_id": SID}

    await artifact_service.delete_artifact(**kwargs, filename="a.txt")
    assert await load(artifact_service, "a.txt") is None
    assert await load(artifact_service, "a.txt", version=0) is None
    assert await artifact_service.list_versions(**kwargs, filename="a.txt") == []
    assert await artifact_service.get_artifact_version(**kwargs, filename="a.txt") is None
    assert await artifact_service.list_artifact_keys(**kwargs) == ["keep.txt", "user:u.txt"]

    await artifact_service.delete_artifact(**kwargs, filename="user:u.txt")
    assert await artifact_service.list_artifact_keys(**kwargs) == ["keep.txt"]
    assert await load(artifact_service, "keep.txt") == text("k")

    # Deleting something missing is not an error; a new save starts a fresh version line.
    await artifact_service.delete_artifact(**kwargs, filename="never-saved.txt")
    assert await save(artifact_service, "a.txt", text("again")) == 0


# --- payloads -----------------------------------------------------------------------------


async def test_text_round_trip(artifact_service: BaseArtifactService):
    await save(artifact_service, "t.txt", text("héllo\nworld"))
    assert await load(artifact_service, "t.txt") == text("héllo\nworld")


async def test_inline_data_round_trip(artifact_service: BaseArtifactService):
    data = bytes(range(256))
    await save(artifact_service, "blob.bin", types.Part.from_bytes(data=data, mime_type="a/b"))
    loaded = await load(artifact_service, "blob.bin")
    assert loaded is not None and loaded.inline_data is not None
    assert loaded.inline_data.data == data
    assert loaded.inline_data.mime_type == "a/b"


async def test_dict_payload_is_validated_into_a_part(artifact_service: BaseArtifactService):
    await save(artifact_service, "d.txt", {"text": "from a dict"})
    await save(artifact_service, "d.bin", {"inlineData": {"data": b"xy", "mimeType": "x/y"}})
    assert await load(artifact_service, "d.txt") == text("from a dict")
    loaded = await load(artifact_service, "d.bin")
    assert loaded == types.Part.from_bytes(data=b"xy", mime_type="x/y")


async def test_plain_file_data_round_trip(artifact_service: BaseArtifactService):
    part = types.Part.from_uri(file_uri="gs://bucket/report.pdf", mime_type="application/pdf")
    await save(artifact_service, "ref.pdf", part)
    assert await load(artifact_service, "ref.pdf") == part
    info = await artifact_service.get_artifact_version(
        app_name=APP, user_id=USER, session_id=SID, filename="ref.pdf"
    )
    assert info is not None and info.mime_type == "application/pdf"


async def test_artifact_reference_is_resolved_on_load(artifact_service: BaseArtifactService):
    await save(artifact_service, "orig.txt", text("first"))
    await save(artifact_service, "orig.txt", text("second"))
    await save(artifact_service, "user:shared.txt", text("shared"))
    orig = f"artifact://apps/{APP}/users/{USER}/sessions/{SID}/artifacts/orig.txt/versions/0"
    shared = f"artifact://apps/{APP}/users/{USER}/artifacts/user:shared.txt/versions/0"

    await save(artifact_service, "link.txt", types.Part.from_uri(file_uri=orig, mime_type="t/p"))
    await save(artifact_service, "link2.txt", {"fileData": {"fileUri": shared}})
    assert await load(artifact_service, "link.txt") == text("first")
    assert await load(artifact_service, "link2.txt") == text("shared")
    # A reference to a reference is followed too; a user's file that names a session's
    # file is read in that session only.
    link = f"artifact://apps/{APP}/users/{USER}/sessions/{SID}/artifacts/link.txt/versions/0"
    await save(artifact_service, "user:link3", types.Part.from_uri(file_uri=link, mime_type="x"))
    assert await load(artifact_service, "user:link3") == text("first")
    for elsewhere in (None, "s-other"):
        with pytest.raises(InputValidationError, match="outside session"):
            await load(artifact_service, "user:link3", session_id=elsewhere)
    # A reference's type is its target's, not known until it is read (as google-adk).
    info = await artifact_service.get_artifact_version(
        app_name=APP, user_id=USER, session_id=SID, filename="link.txt"
    )
    assert info is not None and info.mime_type is None


async def test_a_reference_to_another_sessions_artifact_is_refused(
    artifact_service: BaseArtifactService,
):
    """A session's reference reads nothing of another session (google-adk refuses it too)."""
    await save(artifact_service, "secret", text("of another session"), session_id="s-other")
    uri = f"artifact://apps/{APP}/users/{USER}/sessions/s-other/artifacts/secret/versions/0"
    for filename in ("steal", "user:steal"):
        with pytest.raises(InputValidationError, match="outside session"):
            await save(artifact_service, filename, {"fileData": {"fileUri": uri}})
        assert await load(artifact_service, filename) is None


async def test_a_load_follows_at_most_five_references(artifact_service: BaseArtifactService):
    await save(artifact_service, "c0", text("end"))
    for n in range(1, 7):
        uri = f"artifact://apps/{APP}/users/{USER}/sessions/{SID}/artifacts/c{n - 1}/versions/0"
        await save(artifact_service, f"c{n}", {"fileData": {"fileUri": uri}})
    assert await load(artifact_service, "c5") == text("end")  # five references
    with pytest.raises(InputValidationError, match="more than 5 artifact references"):
        await load(artifact_service, "c6")


async def test_reference_to_missing_artifact_loads_none(artifact_service: BaseArtifactService):
    uri = f"artifact://apps/{APP}/users/{USER}/sessions/{SID}/artifacts/gone.txt/versions/3"
    await save(artifact_service, "dangling", {"fileData": {"fileUri": uri}})
    assert await load(artifact_service, "dangling") is None


async def test_circular_reference_is_reported(artifact_service: BaseArtifactService):
    uri = f"artifact://apps/{APP}/users/{USER}/sessions/{SID}/artifacts/loop/versions/0"
    await save(artifact_service, "loop", {"fileData": {"fileUri": uri}})
    with pytest.raises(InputValidationError, match="Circular"):
        await load(artifact_service, "loop")


@pytest.mark.parametrize("owner", [("other-app", USER), (APP, "other-user")])
async def test_a_reference_to_another_apps_or_users_artifact_is_refused(
    artifact_service: BaseArtifactService, owner: tuple[str, str]
):
    """A reference reads nothing its saver may not read itself (an API token of one app)."""
    app, user = owner
    await artifact_service.save_artifact(app_name=app, user_id=user, session_id="s-x",
                                         filename="secret", artifact=text("secret"))
    uri = f"artifact://apps/{app}/users/{user}/sessions/s-x/artifacts/secret/versions/0"
    with pytest.raises(InputValidationError, match="outside app"):
        await save(artifact_service, "steal", {"fileData": {"fileUri": uri}})
    assert await load(artifact_service, "steal") is None


@pytest.mark.parametrize(
    "uri",
    [
        "artifact://apps/a/users/u/sessions/s/artifacts/f",  # no version
        "artifact://apps/a/users/u/artifacts/f/versions/0",  # session file without session
        "artifact://apps/a/users/u/sessions/s/artifacts/f/versions/latest",
        "artifact://nonsense",
    ],
)
async def test_malformed_artifact_reference_is_rejected(
    artifact_service: BaseArtifactService, uri: str
):
    with pytest.raises(InputValidationError, match="artifact reference"):
        await save(artifact_service, "bad", {"fileData": {"fileUri": uri}})
    assert await load(artifact_service, "bad") is None


@pytest.mark.parametrize(
    "artifact",
    [
        types.Part(function_call=types.FunctionCall(name="f", args={})),
        types.Part(),
        {"noSuchField": 1},
        "just a string",
    ],
    ids=["function_call", "empty", "bad-dict", "str"],
)
async def test_unsupported_payloads_are_rejected(
    artifact_service: BaseArtifactService, artifact: object
):
    with pytest.raises(InputValidationError):
        await save(artifact_service, "x", artifact)  # type: ignore[arg-type]
    assert await artifact_service.list_artifact_keys(
        app_name=APP, user_id=USER, session_id=SID
    ) == []


# --- no aliasing --------------------------------------------------------------------------


async def test_saved_and_loaded_parts_do_not_alias(artifact_service: BaseArtifactService):
    part = types.Part(text="original")
    await save(artifact_service, "a.txt", part)
    part.text = "mutated after save"
    loaded = await load(artifact_service, "a.txt")
    assert loaded == text("original")
    assert loaded is not part
    loaded.text = "mutated after load"  # type: ignore[union-attr]
    assert await load(artifact_service, "a.txt") == text("original")

    blob = types.Part.from_bytes(data=b"abc", mime_type="x/y")
    await save(artifact_service, "b.bin", blob)
    blob.inline_data.mime_type = "changed/type"  # type: ignore[union-attr]
    loaded_blob = await load(artifact_service, "b.bin")
    assert loaded_blob is not None and loaded_blob.inline_data is not None
    assert loaded_blob.inline_data.mime_type == "x/y"
    loaded_blob.inline_data.data = b"zzz"
    again = await load(artifact_service, "b.bin")
    assert again is not None and again.inline_data is not None
    assert again.inline_data.data == b"abc"


async def test_metadata_does_not_alias(artifact_service: BaseArtifactService):
    meta = {"tags": ["a"]}
    await save(artifact_service, "a.txt", text("x"), custom_metadata=meta)
    meta["tags"].append("mutated")
    meta["new"] = 1
    kwargs = {"app_name": APP, "user_id": USER, "session_id": SID, "filename": "a.txt"}
    info = await artifact_service.get_artifact_version(**kwargs)
    assert info is not None and info.custom_metadata == {"tags": ["a"]}
    info.custom_metadata["tags"].append("mutated")
    infos = await artifact_service.list_artifact_versions(**kwargs)
    infos[0].custom_metadata["other"] = True
    again = await artifact_service.get_artifact_version(**kwargs)
    assert again is not None and again.custom_metadata == {"tags": ["a"]}
