"""A memory file of the test's own, for the memory tests that load no model."""

from __future__ import annotations

from pathlib import Path

import pytest

from vita.memory.store import MemoryStore


@pytest.fixture
def store(tmp_path: Path):
    opened = MemoryStore(tmp_path / "memory.sqlite3")
    yield opened
    opened.close()
