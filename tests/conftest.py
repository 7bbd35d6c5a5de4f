"""Shared pytest setup for every test folder (keep it small: folder-specific helpers live beside their tests)."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The repository's ``fixtures/`` folder (real captures; see fixtures/README.md)."""
    return FIXTURES
