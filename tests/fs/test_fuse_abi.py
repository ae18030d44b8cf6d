"""fuse_front.py sizes its readdir budget with offsets of the kernel's FUSE structures
(struct fuse_dirent, struct fuse_direntplus), written there as numbers: the system's own
<linux/fuse.h> must agree, or a listing would be cut at the wrong place (issue 37, point 3)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from strongroom.fs import fuse_front

pytestmark = pytest.mark.unit

PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#include <linux/fuse.h>
int main(void) {
    printf("%zu %zu\n", offsetof(struct fuse_dirent, name), offsetof(struct fuse_direntplus, dirent.name));
    return 0;
}
"""


def test_the_redeclared_dirent_offsets_match_the_kernel_header(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None and Path("/usr/include/linux/fuse.h").exists(), "scripts/install.sh installs gcc and the kernel headers"
    (tmp_path / "probe.c").write_text(PROBE)
    subprocess.run([cc, "-o", str(tmp_path / "probe"), str(tmp_path / "probe.c")], check=True)
    dirent, direntplus = map(int, subprocess.run([str(tmp_path / "probe")], capture_output=True, check=True).stdout.split())
    assert (dirent, direntplus) == (fuse_front._DIRENT_NAME, fuse_front._DIRENTPLUS_NAME)
