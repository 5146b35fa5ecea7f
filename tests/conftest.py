"""Test-wide setup: real (network) model calls are blocked for the whole suite."""

from __future__ import annotations

import pytest

from orchestrator.models.guard import set_model_requests_allowed


@pytest.fixture(autouse=True, scope="session")
def _block_real_model_requests():
    set_model_requests_allowed(False)
    yield
    set_model_requests_allowed(True)
