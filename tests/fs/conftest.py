from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fs.mounts import Mount


@pytest.fixture
def vol(tmp_path: Path) -> Iterator[Mount]:
    m = Mount(tmp_path).init().start()
    yield m
    m.stop()
