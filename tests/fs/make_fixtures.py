"""Regenerates tests/fs/fixtures/broken/ (run by hand): a volume built with the product's own
front end (VolumeOps, no mount needed), then damaged in known ways that test_fsck expects.
    .venv/bin/python -m tests.fs.make_fixtures"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from strongroom.fs import content
from strongroom.fs.fuse_ops import VolumeOps
from strongroom.fs.volume import init_volume, unlock

OUT = Path(__file__).with_name("fixtures") / "broken"
PASSPHRASE = "fixture passphrase"


def _write(ops: VolumeOps, path: str, data: bytes) -> None:
    fh = ops.create(path, 0o644, os.O_WRONLY)
    ops.write(path, data, 0, fh)
    ops.release(path, fh)


def main() -> None:
    os.environ["STRONGROOM_ARGON2_MEMORY_KIB"] = "256"
    os.environ["STRONGROOM_ARGON2_ITERATIONS"] = "1"
    shutil.rmtree(OUT, ignore_errors=True)
    init_volume(OUT, PASSPHRASE)
    ops = VolumeOps(str(OUT), unlock(OUT, lambda: PASSPHRASE))
    ops.mkdir("/docs", 0o755)
    _write(ops, "/docs/fine.txt", b"fine\n" * 2000)
    _write(ops, "/docs/damaged-block.bin", bytes(range(256)) * 64)  # 4 blocks; block 2 is flipped below
    _write(ops, "/damaged-header.bin", b"h" * 5000)
    _write(ops, "/" + "long-name-" * 20, b"long")
    ops.symlink("/link", "docs/fine.txt")
    ops.setxattr("/docs/fine.txt", "user.origin", b"fixture", 0)
    lower = {p: ops.paths.lower(p) for p in ("/docs/damaged-block.bin", "/damaged-header.bin")}
    with open(lower["/docs/damaged-block.bin"], "r+b") as f:
        f.seek(content.block_offset(2) + 50)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x80]))
    with open(lower["/damaged-header.bin"], "r+b") as f:
        f.seek(30)
        f.write(b"\x00\x00")
    (OUT / "Zm9yZ2VkLW5hbWU").write_text("an entry whose name was never encrypted with this volume's key")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
