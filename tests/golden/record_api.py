"""Record google-adk's own api_server answering the HTTP golden steps into ``adk_api_2_13.json``.

Run with the python of a venv holding google-adk==2.13.0 (and its ``fastapi`` and ``httpx``)::

    <python> tests/golden/record_api.py [--check]

The apps of ``api_apps.py`` are built with google-adk's classes and written as an agents
directory (one module per app, as ``adk api_server <dir>`` serves them); the server is
google-adk's ``get_fast_api_app`` with in-memory services, called in-process through
FastAPI's ``TestClient``. The steps of ``api_steps.py`` are sent in order and their masked
answers written. ``--check`` exits non-zero if the stored file differs from a fresh recording.
"""

import logging
import sys
import tempfile
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import api_apps  # noqa: E402  (after the path tweak; this file is run as a script)
import api_steps  # noqa: E402
from golden_file import write_or_check  # noqa: E402

GOLDEN = HERE / "adk_api_2_13.json"
EXPECTED_VERSION = "2.13.0"


def _model_class() -> type:
    """google-adk's ``BaseLlm`` answering with :func:`api_apps.answer`."""
    from google.adk.models import BaseLlm, LlmResponse
    from google.genai import types

    class GoldenLlm(BaseLlm):
        """The golden apps' fake model on google-adk's side."""

        model: str = "golden"

        async def generate_content_async(
            self, llm_request: Any, stream: bool = False
        ) -> AsyncGenerator[Any, None]:
            chunks = api_apps.answer(llm_request.contents)
            if not stream:
                chunks = chunks[-1:]  # only the aggregate, as our FunctionLlm
            for index, parts in enumerate(chunks):
                yield LlmResponse(content=types.Content(role="model", parts=parts),
                                  partial=True if index < len(chunks) - 1 else None,
                                  usage_metadata=api_apps.USAGE)

    return GoldenLlm


def _agents_dir(root: Path) -> Path:
    """An agents directory serving the apps built with google-adk's classes."""
    from types import SimpleNamespace

    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.tools import LongRunningFunctionTool, ToolContext

    model = _model_class()
    ns = SimpleNamespace(App=App, LlmAgent=LlmAgent, LongRunningFunctionTool=LongRunningFunctionTool,
                         ToolContext=ToolContext)
    api_apps.BUILT.update(api_apps.build_apps(ns, model))
    for name in api_apps.BUILT:
        package = root / name
        package.mkdir()
        (package / "__init__.py").write_text(f"from api_apps import BUILT\n\napp = BUILT[{name!r}]\n")
    return root


def record() -> dict[str, Any]:
    """The masked answers of google-adk's api_server to every step."""
    from fastapi.testclient import TestClient
    from google.adk.cli.fast_api import get_fast_api_app

    with tempfile.TemporaryDirectory() as tmp:
        agents = _agents_dir(Path(tmp))
        # In-memory services: nothing on disk, and google-adk's reference behaviour (its
        # default local sqlite and file services differ in details, e.g. a text artifact's
        # mimeType is not kept by the file service).
        app = get_fast_api_app(agents_dir=str(agents), session_service_uri="memory://",
                               artifact_service_uri="memory://", memory_service_uri="memory://",
                               use_local_storage=False, web=False)
        with TestClient(app, raise_server_exceptions=False) as client:

            def send(method: str, path: str, body: Any,
                     params: dict[str, Any] | None) -> tuple[int, str, str]:
                response = client.request(method, path, json=body, params=params)
                # ADK names its agents directory in some errors: a temporary one here.
                text = response.text.replace(str(agents), "<agents dir>")
                return response.status_code, response.headers.get("content-type", ""), text

            return api_steps.masked(api_steps.run_steps(send))


def main(argv: list[str]) -> int:
    """Record (or ``--check``) the golden file; return the exit status."""
    import google.adk

    if google.adk.__version__ != EXPECTED_VERSION:
        print(f"expected google-adk {EXPECTED_VERSION}, found {google.adk.__version__}")
        return 2
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    return write_or_check(GOLDEN, api_steps.to_json(record()), check="--check" in argv,
                          recorded=f"{len(api_steps.STEPS)} steps")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
