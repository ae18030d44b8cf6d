"""The whole public POSIX suite pjdfstest, run as root inside an --allow-other mount (the suite
switches to other users and groups itself), once on a plain volume and once on a volume with
access rules in permissive mode, so every request also goes through the access-rule layer.

A run fails on any failing subtest not listed in EXPECTED_FAILURES.  The list may hold at most as
many subtests as gocryptfs 2.3 fails in the same conditions (7 on the project's machine kind:
../shared/conformance/README.md), and every entry says why it fails.  An entry that starts
passing fails the run too, so the list only shrinks."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fs import pjdfstest
from tests.fs.mounts import Mount
from tests.serverproc import cli

GOCRYPTFS_FAILURES = 7

EXPECTED_FAILURES: dict[tuple[str, int], str] = {
    # symlink(2) with a target of PATH_MAX - 1 bytes: a symlink's target is stored encrypted (a
    # header, a tag and base64) in a lower symlink, whose own target may not exceed 4,095 bytes,
    # so plaintext targets end at 2,900 bytes and longer ones answer ENAMETOOLONG (FORMAT.md §5).
    # gocryptfs fails the same two, for the same reason.
    ("symlink/03.t", 1): "encrypted symlink target longer than the lower 4,095-byte limit",
    ("symlink/03.t", 2): "the symlink of subtest 1 does not exist to be removed",
}


@pytest.fixture(scope="module")
def suite() -> Iterator[Path]:
    build = Path(tempfile.mkdtemp(prefix="sr-pjdfstest-"))
    try:
        yield pjdfstest.build(build)
    finally:
        shutil.rmtree(build, ignore_errors=True)


def _shared_mount() -> tuple[Path, Mount]:
    root = Path(tempfile.mkdtemp(prefix="sr-pjd-"))
    root.chmod(0o755)  # the suite's other users must reach the mount
    return root, Mount(root).init()


def _run(suite: Path, m: Mount) -> None:
    m.mnt.chmod(0o755)  # the suite's other users work in directories it makes here
    work = m.mnt / "pjdfstest"
    work.mkdir(mode=0o755)
    result = pjdfstest.run(suite, work)
    assert result.files >= 230 and result.tests >= 8500, f"the suite did not run whole:\n{result.output[-3000:]}"
    assert not result.broken, result.broken
    unexpected = sorted(result.failed - EXPECTED_FAILURES.keys())
    fixed = sorted(EXPECTED_FAILURES.keys() - result.failed)
    assert not unexpected, f"{len(unexpected)} failing subtests: {unexpected[:50]}\n{result.output[-4000:]}"
    assert not fixed, f"expected failures that pass now (remove them from the list): {fixed}"


def test_expected_failures_stay_within_gocryptfs() -> None:
    assert len(EXPECTED_FAILURES) <= GOCRYPTFS_FAILURES
    assert all(cause for cause in EXPECTED_FAILURES.values())


# ~4.5 min alone on this machine kind; the default 300 s leaves no margin on a shared one
@pytest.mark.timeout(1200)
def test_whole_suite_on_a_shared_mount(suite: Path) -> None:
    root, m = _shared_mount()
    try:
        m.start("--allow-other")
        _run(suite, m)
    finally:
        m.stop()
        shutil.rmtree(root, ignore_errors=True)


# ~4.5 min alone on this machine kind; the default 300 s leaves no margin on a shared one
@pytest.mark.timeout(1200)
def test_whole_suite_through_permissive_access_rules(suite: Path) -> None:
    root, m = _shared_mount()
    try:
        for args in (["add", str(m.lower), "--allow", "/usr/bin/true", "--mode", "r"], ["mode", str(m.lower), "permissive"]):
            r = cli("acl", *args, "--passphrase-file", str(m.pwfile))
            assert r.returncode == 0, r.stderr
        m.start("--allow-other")
        _run(suite, m)
        # the rules were in force: the suite's helper was let through as a would-be denial
        assert f"would deny: {suite / 'pjdfstest'}" in m.log.read_text(), m.log.read_text()[-2000:]
    finally:
        m.stop()
        shutil.rmtree(root, ignore_errors=True)
