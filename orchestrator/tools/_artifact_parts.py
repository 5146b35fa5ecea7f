"""Turning a saved artifact into a part a model accepts (text where the model reads no bytes)."""

from __future__ import annotations

import base64
import binascii
import io
import logging
import re
import zipfile

from google.genai import types

logger = logging.getLogger(__name__)

_INLINE_PREFIXES = ("image/", "audio/", "video/")
"""Kinds of file Gemini takes as inline bytes."""
_INLINE_TYPES = frozenset({"application/pdf"})
_NOT_INLINE = frozenset({"image/svg", "image/svg+xml", "image/xml"})
"""Images Gemini refuses as bytes (XML); they are sent as text instead."""
_TEXT_TYPES = frozenset({
    "application/csv", "application/json", "application/svg+xml", "application/xml",
    "image/svg", "image/svg+xml", "image/xml",
})
_TEXT_SUFFIXES = (".csv", ".txt", ".json", ".xml")
_DOCX_TYPES = frozenset({
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/octet-stream",
})
_SPREADSHEET_TYPES = frozenset({
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/vnd.ms-excel",
})
_DOCX_READ_LIMIT = 10 * 1024 * 1024
"""At most this much of a document's XML is read (a zip bomb stays harmless)."""
_WORD_NAMESPACE = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_MAX_SHEET_ROWS = 100


def _mime(value: str | None) -> str | None:
    return value.split(";", 1)[0].strip().lower() if value else None


def _inline_ok(mime: str | None) -> bool:
    return bool(mime) and mime not in _NOT_INLINE and (
        mime.startswith(_INLINE_PREFIXES) or mime in _INLINE_TYPES  # type: ignore[union-attr]
    )


def _decode_base64(data: str) -> bytes | None:
    for altchars in (None, b"-_"):
        try:
            return base64.b64decode(data, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            continue
    return None


def _docx_text(data: bytes) -> str | None:
    """The paragraphs of a Word document, one per line (None if it is not one).

    Regular expressions rather than an XML parser: a hostile document cannot expand entities.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            if "word/document.xml" not in archive.namelist():
                return None
            with archive.open("word/document.xml") as member:
                xml = member.read(_DOCX_READ_LIMIT).decode("utf-8", errors="ignore")
    except (zipfile.BadZipFile, KeyError, OSError, ValueError) as error:
        logger.debug("Not a readable .docx: %s", error)
        return None
    declared = re.search(rf'xmlns:(\w+)="{re.escape(_WORD_NAMESPACE)}"', xml)
    ns = declared.group(1) if declared else "w"
    lines = []
    for paragraph in re.split(rf"<{ns}:p(?:\s[^>]*)?>", xml):
        runs = re.findall(rf"<{ns}:t(?:\s[^>]*)?>([^<]*)</{ns}:t>", paragraph)
        if runs:
            lines.append("".join(runs))
    return "\n".join(lines)


def _spreadsheet_text(data: bytes) -> str:
    """Each sheet as a markdown table (first rows only); needs pandas, openpyxl and tabulate."""
    try:
        import pandas as pd  # type: ignore[import-untyped]  # optional: not a dependency
    except ImportError as error:
        return f"[This spreadsheet cannot be shown: {error!r}. Install pandas, openpyxl and tabulate.]"
    try:
        sheets = []
        with pd.ExcelFile(io.BytesIO(data)) as workbook:
            for name in workbook.sheet_names:
                frame = workbook.parse(name)
                if frame.empty:
                    continue
                table = frame.head(_MAX_SHEET_ROWS).to_markdown(index=False)
                if len(frame) > _MAX_SHEET_ROWS:
                    table += f"\n\n[First {_MAX_SHEET_ROWS} of {len(frame)} rows.]"
                sheets.append(f"### Sheet: {name}\n\n{table}")
    except Exception as error:  # a broken file is described, never raised into the turn
        return f"[This spreadsheet cannot be read: {error!r}]"
    return "\n\n".join(sheets) or "[Empty spreadsheet]"


def as_safe_part_for_llm(
    artifact: types.Part, artifact_name: str, enable_spreadsheet_parsing: bool = False
) -> types.Part:
    """The artifact as a part Gemini accepts.

    Text, images, audio, video and PDF pass as they are; Word documents, JSON, CSV, XML and
    other text become text; a spreadsheet becomes markdown tables when parsing is enabled;
    any other binary file becomes a one-line description (name, type, size).
    """
    inline = artifact.inline_data
    if inline is None:
        return artifact
    mime = _mime(inline.mime_type)
    if inline.mime_type and _inline_ok(mime):
        base, sep, params = inline.mime_type.partition(";")
        canonical = f"{base.strip().lower()}{sep}{params}"
        if canonical == inline.mime_type:
            return artifact
        return artifact.model_copy(
            update={"inline_data": inline.model_copy(update={"mime_type": canonical})}
        )
    mime = mime or "application/octet-stream"
    data: bytes | str | None = inline.data
    if data is None:
        return types.Part(text=f"[Artifact: {artifact_name}, type: {mime}. It has no data.]")
    if isinstance(data, str):
        decoded = _decode_base64(data)
        if decoded is None:
            return types.Part(text=data)
        data = decoded
    lower = artifact_name.lower()
    if mime in _DOCX_TYPES or lower.endswith(".docx"):
        text = _docx_text(data)
        if text is not None:
            return types.Part(text=text)
    if mime.startswith("text/") or mime in _TEXT_TYPES or lower.endswith(_TEXT_SUFFIXES):
        return types.Part(text=data.decode("utf-8", errors="replace"))
    if enable_spreadsheet_parsing and (mime in _SPREADSHEET_TYPES or lower.endswith((".xlsx", ".xls"))):
        return types.Part(text=_spreadsheet_text(data))
    return types.Part(text=(
        f"[Binary artifact: {artifact_name}, type: {mime}, size: {len(data) / 1024:.1f} KB. "
        "It cannot be shown here.]"
    ))
