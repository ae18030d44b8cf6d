"""The package build carries the compiled helpers: a wheel built from the sources holds each
libsr*.so beside its module, and each one loads (with its ABI number where it has one) from
the wheel's own copy, built for any CPU of the architecture (not -march=native)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from strongroom import helpers
from strongroom.fs import fuseio

ROOT = Path(__file__).resolve().parent.parent
HELPERS = {
    "strongroom/rng/libsrrng.so": None,
    "strongroom/fs/libsrblocks.so": ("sr_abi_version", 2),
    "strongroom/fs/libsrproc.so": None,
    "strongroom/fs/libsrfuseio.so": ("sr_fuseio_abi_version", fuseio.ABI),
}


def test_a_wheel_carries_every_helper_and_each_loads(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.egg-info"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(tree)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = dist.glob("strongroom-*.whl")
    out = tmp_path / "unpacked"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert set(HELPERS) <= names, sorted(n for n in names if n.endswith(".so"))
        z.extractall(out)
    for name, abi in HELPERS.items():
        assert helpers.load(out / name, abi) is not None, f"{name} does not load"
        assert b"-march=native" not in (out / name).read_bytes(), f"{name} is built for this CPU only"
