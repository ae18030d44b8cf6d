"""The compiled helpers, built with the package (``pip install .``, a wheel, or an editable
install): plain C shared libraries loaded with ctypes (strongroom/helpers.py), not Python
extension modules, so each keeps its own name (libsr*.so beside the module that loads it).
Portable code only: what needs newer instructions is picked at run time inside the C.
Each is optional: a machine that cannot build one gets the module's Python path (slower), and
the loaders say so."""

from __future__ import annotations

import os
from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildHelpers(build_ext):
    def get_ext_filename(self, fullname: str) -> str:
        *package, name = fullname.split(".")
        return os.path.join(*package, name + ".so")

    def get_export_symbols(self, ext: Extension) -> list[str]:
        return []  # no PyInit_*: ctypes loads these


HELPERS = [
    # strongroom.rng: FIPS blocks, ent's sums, SP 800-90B tests, RDRAND/RDSEED
    Extension("strongroom.rng.libsrrng", sorted(glob("src/strongroom/rng/*.c")), extra_compile_args=["-O3"], optional=True),
    # the block loop around the OS's libcrypto (AES-256-GCM per 4 KiB block, GIL released)
    Extension("strongroom.fs.libsrblocks", ["src/strongroom/fs/blockcrypt.c"], libraries=["crypto"], optional=True),
    # the access checks' process identity (/proc reads in one call)
    Extension("strongroom.fs.libsrproc", ["src/strongroom/fs/procid.c"], optional=True),
    # the mount's /dev/fuse I/O: the set-id shim, the reader baton and the write fast path (Debian ships no libfuse3.so link)
    Extension(
        "strongroom.fs.libsrfuseio",
        [f"src/strongroom/fs/{c}.c" for c in ("fuseio", "setid", "baton", "fastwrite")],
        depends=["src/strongroom/fs/fuseio.h"],
        extra_link_args=["-l:libfuse3.so.3"],
        optional=True,
    ),
]

setup(ext_modules=HELPERS, cmdclass={"build_ext": BuildHelpers})
