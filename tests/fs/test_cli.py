"""fs commands end to end: read-only mounts, clean unmount on SIGTERM and SIGINT, and standalone
encrypt/decrypt (passphrase- and volume-keyed, stdin/stdout, damage, cuts)."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from strongroom.fs import mount
from tests.fs.mounts import Mount
from tests.serverproc import cli


def test_read_only_mount(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start()
    (m.mnt / "f").write_text("data")
    m.stop()
    m.start("--read-only")
    try:
        assert (m.mnt / "f").read_text() == "data"
        for attempt in (
            lambda: (m.mnt / "g").write_text("x"),
            lambda: (m.mnt / "f").write_text("y"),
            lambda: os.mkdir(m.mnt / "d"),
        ):
            with pytest.raises(OSError) as e:
                attempt()
            assert e.value.errno == errno.EROFS
    finally:
        m.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_daemon_unmounts_cleanly_on_signal(tmp_path: Path, sig: signal.Signals) -> None:
    m = Mount(tmp_path).init().start()
    (m.mnt / "f").write_text("kept")
    assert m.proc is not None
    m.proc.send_signal(sig)
    assert m.proc.wait(20) == 0
    deadline = time.monotonic() + 5
    while mount.mounted_at(m.mnt) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mount.mounted_at(m.mnt) is None  # no dead mount left behind
    m.proc = None
    m.start()
    assert (m.mnt / "f").read_text() == "kept"
    m.stop()


def test_standalone_encrypt_decrypt_cli(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("file passphrase")
    plain = tmp_path / "plain"
    plain.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    enc, back = tmp_path / "enc", tmp_path / "back"
    assert cli("fs", "encrypt", str(plain), "-o", str(enc), "--passphrase-file", str(pw)).returncode == 0
    assert plain.read_bytes() not in enc.read_bytes()
    assert cli("fs", "decrypt", str(enc), "-o", str(back), "--passphrase-file", str(pw)).returncode == 0
    assert back.read_bytes() == plain.read_bytes()
    r = cli("fs", "decrypt", "-", "-o", "-", "--passphrase-file", str(pw), input=enc.read_bytes())
    assert r.returncode == 0 and r.stdout == plain.read_bytes()
    cut = tmp_path / "cut"
    cut.write_bytes(enc.read_bytes()[: -4124 - 36 - 17 - 28])  # one whole block and the end marker gone
    out = tmp_path / "out"
    r = cli("fs", "decrypt", str(cut), "-o", str(out), "--passphrase-file", str(pw))
    assert r.returncode == 1 and b"damaged" in r.stderr and not out.exists() and not Path(str(out) + ".partial").exists()
    flipped = bytearray(enc.read_bytes())
    flipped[len(flipped) // 2] ^= 4
    cut.write_bytes(flipped)
    r = cli("fs", "decrypt", str(cut), "-o", str(out), "--passphrase-file", str(pw))
    assert r.returncode == 1 and b"does not authenticate" in r.stderr and not out.exists()
    wrong = tmp_path / "wrong"
    wrong.write_text("nope")
    r = cli("fs", "decrypt", str(enc), "-o", str(out), "--passphrase-file", str(wrong))
    assert r.returncode == 2 and r.stderr.strip() == b"strongroom: error: wrong passphrase"
    r = cli("fs", "decrypt", str(plain), "-o", str(out), "--passphrase-file", str(pw))
    assert r.returncode == 2 and b"not a Strongroom encrypted file" in r.stderr
    # keyed by a volume: any of its key sources opens it
    m = Mount(tmp_path).init()
    r = cli(
        "fs", "encrypt", "-", "-o", str(enc), "--volume", str(m.lower), "--passphrase-file", str(m.pwfile), input=b"volume keyed"
    )
    assert r.returncode == 0, r.stderr
    r = cli("fs", "decrypt", str(enc), "-o", "-", "--volume", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0 and r.stdout == b"volume keyed"
    r = cli("fs", "decrypt", str(enc), "-o", "-", "--passphrase-file", str(m.pwfile))
    assert r.returncode == 1 and b"pass --volume" in r.stderr


def test_encrypt_to_a_fifo_writes_in_place(tmp_path: Path) -> None:
    """An output that is not a regular file (a FIFO here, /dev/null or a tape in life) is written
    in place: the OUT.partial-and-rename dance would have replaced it with a file."""
    pw = tmp_path / "pw"
    pw.write_text("file passphrase")
    plain = tmp_path / "plain"
    plain.write_bytes(os.urandom(2 * 1024 * 1024 + 5))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = tmp_path / "got"
    with open(got, "wb") as sink:
        reader = subprocess.Popen(["cat", str(fifo)], stdout=sink)
        r = cli("fs", "encrypt", str(plain), "-o", str(fifo), "--passphrase-file", str(pw), "--threads", "2")
        assert reader.wait(60) == 0
    assert r.returncode == 0, r.stderr
    sealed = got.read_bytes()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and not Path(str(fifo) + ".partial").exists()
    r = cli("fs", "decrypt", "-", "-o", "-", "--passphrase-file", str(pw), "--threads", "1", input=sealed)
    assert r.returncode == 0 and r.stdout == plain.read_bytes()


def test_sigkill_of_the_background_daemon_leaves_a_clearable_mount(tmp_path: Path) -> None:
    m = Mount(tmp_path).init()
    r = cli("fs", "mount", str(m.lower), str(m.mnt), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0, r.stderr
    pid = int(subprocess.run(["pgrep", "-f", f"fs mount {m.lower} "], capture_output=True, text=True).stdout.split()[0])
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    r = cli("fs", "umount", str(m.mnt))
    assert r.returncode == 0 or mount.mounted_at(m.mnt) is None
    subprocess.run(["fusermount3", "-u", "-z", str(m.mnt)], capture_output=True)
    assert mount.mounted_at(m.mnt) is None
