"""The compiled helpers' own tests, run again against builds with AddressSanitizer and
UndefinedBehaviorSanitizer (any report aborts the run): every out-of-bounds access, use after
free or undefined operation the tests can reach fails here.  The helpers' tests compare each C
path with its Python oracle on many inputs and call every entry point with sizes it must refuse.
fuseio.c with its set-id shim, reader baton and write fast path is driven on a socket pair
(test_fuseio.py, test_fastwrite.py), as the kernel would drive it, without a mount."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
BUILDS = {
    "libsrrng.so": (sorted(str(p) for p in (ROOT / "src/strongroom/rng").glob("*.c")), []),
    "libsrblocks.so": ([str(ROOT / "src/strongroom/fs/blockcrypt.c")], ["-lcrypto"]),
    "libsrproc.so": ([str(ROOT / "src/strongroom/fs/procid.c")], []),
    "libsrfuseio.so": (
        [str(ROOT / f"src/strongroom/fs/{c}.c") for c in ("fuseio", "setid", "baton", "fastwrite")],
        ["-l:libfuse3.so.3"],
    ),
}
TESTS = [
    "tests/fs/test_blocks.py",
    "tests/fs/test_format.py",
    "tests/fs/test_procid.py",
    "tests/fs/test_fuseio.py",
    *(  # the fast path's decisions on a socket pair (its mounted test stays out: no daemon runs sanitized)
        f"tests/fs/test_fastwrite.py::{t}"
        for t in (
            "test_whole_blocks_in_place_are_answered_here",
            "test_everything_else_is_handed_on",
            "test_an_fsync_of_a_registered_handle_is_answered_here",
            "test_a_handle_released_is_forgotten",
            "test_a_truncated_file_takes_its_new_key",
        )
    ),
    "tests/rng/test_stats.py",
    "tests/rng/test_health.py",
    "tests/rng/test_native_lengths.py",
]


def test_helpers_under_address_and_undefined_behaviour_sanitizers(tmp_path: Path) -> None:
    for name, (sources, libs) in BUILDS.items():
        subprocess.run(["cc", *FLAGS, "-shared", "-fPIC", "-o", str(tmp_path / name), *sources, *libs], check=True)
    asan = subprocess.run(["cc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True).stdout.strip()
    env = dict(
        os.environ,
        LD_PRELOAD=asan,  # the runtime must come first; python itself is not instrumented
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",  # the interpreter's own allocations are not ours
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
        STRONGROOM_TEST_SANITIZED_DIR=str(tmp_path),
    )
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "tests.sanitized", "-p", "no:cacheprovider", "-p", "no:xdist", *TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = r.stdout[-3000:] + r.stderr[-6000:]
    assert r.returncode == 0, report
    assert "ERROR: AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr, report
    assert " passed" in r.stdout, report
