"""A mount with each part of the compiled /dev/fuse I/O switched off (test_fuseio.py checks the
parts themselves): small and big files, written and read by several threads at once, come back
exact, and the log says how the mount reads its requests."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fs.mounts import Mount


def _log_says(m: Mount, text: str) -> bool:
    deadline = time.monotonic() + 10  # written by a thread once INIT is answered
    while text not in m.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    return text in m.log.read_text()


@pytest.mark.parametrize(
    ("options", "lines"),
    [
        (["--no-reader-baton"], ["(no reader baton)", "set-id bits are cleared by the daemon"]),
        (["--no-setid-shim"], ["(reader baton)", "set-id bits are cleared by the kernel"]),
        (["--no-reader-baton", "--no-setid-shim"], ["(no reader baton)", "set-id bits are cleared by the kernel"]),
    ],
)
def test_a_mount_without_a_part_serves_the_same_bytes(tmp_path: Path, options: list[str], lines: list[str]) -> None:
    m = Mount(tmp_path).init().start(*options)
    try:
        for line in lines:
            assert _log_says(m, line), m.log.read_text()[-2000:]
        small = {f"d{i % 7}/f{i}": os.urandom(i * 37 % 9000) for i in range(300)}
        big = {f"big{i}": os.urandom((3 << 20) + i * 4099) for i in range(3)}

        def put(item: tuple[str, bytes]) -> None:
            path = m.mnt / item[0]
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(item[1])

        def same(item: tuple[str, bytes]) -> bool:
            return (m.mnt / item[0]).read_bytes() == item[1]

        with ThreadPoolExecutor(6) as pool:
            list(pool.map(put, list(big.items()) + list(small.items())))
            assert all(pool.map(same, list(small.items()) + list(big.items())))
    finally:
        m.stop()
