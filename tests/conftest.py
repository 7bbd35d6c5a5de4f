"""Shared pytest setup for every test folder (keep it small: folder-specific helpers live beside their tests)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tests start from an empty shape table (the on-disk cache is tested on its own, in a temporary folder).
os.environ["ENVOY_DISSECTOR_CACHE"] = "0"

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The repository's ``fixtures/`` folder (real captures; see fixtures/README.md)."""
    return FIXTURES
