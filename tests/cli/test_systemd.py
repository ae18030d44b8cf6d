"""The systemd units and the fstab helper: `systemd-analyze verify` and its offline security
report on the rendered units; each unit's ExecStart and ExecStop run as systemd would run them
(its Environment, its EnvironmentFile, a notify socket), with readiness received; `mount -a`
with an fstab line of type strongroom."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from strongroom.bench.peers import free_port
from strongroom.fs.volume import init_volume
from tests.serverproc import Deployment, cli

BIN = Path(sys.executable).parent
needs_systemd = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")


@pytest.fixture
def units(tmp_path: Path) -> Path:
    out = tmp_path / "units"
    r = cli("server", "systemd-units", "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out


def _unit(path: Path) -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            k, _, v = line.partition("=")
            keys.setdefault(k, []).append(v)
    return keys


def _command(line: str, env: dict[str, str]) -> list[str]:
    """An Exec line as systemd expands it: ${VAR} one word, $VAR split on whitespace."""
    out: list[str] = []
    for word in shlex.split(line):
        if re.fullmatch(r"\$[A-Z_]+", word):
            out += env.get(word[1:], "").split()
        else:
            out.append(re.sub(r"\$\{([A-Z_]+)\}", lambda m: env.get(m.group(1), ""), word))
    return out


def _environment(unit: dict[str, list[str]], env_file: Path | None = None, **overrides: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in unit.get("Environment", []):
        for pair in shlex.split(line):
            k, _, v = pair.partition("=")
            env[k] = v
    if env_file is not None:
        for line in env_file.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                k, _, v = line.partition("=")
                env[k] = v.strip().strip('"')
    env.update(overrides)
    return env


class Notify:
    def __init__(self, root: Path) -> None:
        self.path = root / "notify.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.sock.settimeout(30)

    def receive(self) -> dict[str, str]:
        data = self.sock.recv(4096).decode()
        return dict(line.split("=", 1) for line in data.splitlines())


@needs_systemd
def test_units_verify_and_are_hardened(units: Path) -> None:
    shutil.copy(units / "strongroom-mount@.service", units / "strongroom-mount@vault.service")
    for name in ("strongroom.service", "strongroom-mount@vault.service"):
        r = subprocess.run(["systemd-analyze", "verify", str(units / name)], capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    bad = units / "bad.service"
    bad.write_text((units / "strongroom.service").read_text().replace(str(BIN), "/nonexistent"))
    r = subprocess.run(["systemd-analyze", "verify", str(bad)], capture_output=True, text=True)
    assert r.returncode != 0 and "not executable" in r.stderr  # the check can fail
    r = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", str(units / "strongroom.service")], capture_output=True, text=True
    )
    level = re.search(r"Overall exposure level for strongroom.service: ([0-9.]+)", r.stdout + r.stderr)
    assert level is not None, r.stdout + r.stderr
    exposure = float(level.group(1))
    assert exposure <= 2.0, r.stdout[-2000:]
    server = _unit(units / "strongroom.service")
    for want in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "MemoryDenyWriteExecute", "CapabilityBoundingSet", "User"):
        assert want in server
    assert server["Type"] == ["notify"] and server["Restart"] == ["on-failure"] and server["User"] == ["strongroom"]
    mount = _unit(units / "strongroom-mount@.service")
    assert "strongroom.service" in mount["After"][0] and "network-online.target" in mount["After"][0]
    assert mount["Restart"] == ["on-failure"] and mount["StartLimitIntervalSec"] == ["0"]


def test_the_server_unit_execstart_notifies_when_it_serves(units: Path, tmp_path: Path) -> None:
    (tmp_path / "srv").mkdir()
    d = Deployment(tmp_path / "srv", None)
    unit = _unit(units / "strongroom.service")
    kmip = free_port()
    options = f"--kmip-listen 127.0.0.1:{kmip}"  # STRONGROOM_OPTIONS, as server.env would set it
    env = _environment(unit, STRONGROOM_DATA=str(d.data.path), STRONGROOM_LISTEN="127.0.0.1:0", STRONGROOM_OPTIONS=options)
    notify = Notify(tmp_path)
    argv = _command(unit["ExecStart"][0], env)
    assert argv[0] == str(BIN / "strongroom")
    proc = subprocess.Popen(argv, env={**os.environ, **env, "NOTIFY_SOCKET": str(notify.path)}, stdout=subprocess.PIPE)
    try:
        msg = notify.receive()
        assert msg["READY"] == "1" and msg["MAINPID"] == str(proc.pid)
        url = msg["STATUS"].removeprefix("serving on ")
        health = httpx.get(url + "/health", verify=str(d.data.ca_file)).json()
        assert health["sealed"] is True  # a passphrase seal starts sealed under systemd
        socket.create_connection(("127.0.0.1", kmip), timeout=5).close()  # KMIP listens too
        reload = _command(unit["ExecReload"][0].replace("$MAINPID", str(proc.pid)), env)
        subprocess.run(reload, check=True)
        time.sleep(0.5)
        assert proc.poll() is None and httpx.get(url + "/health", verify=str(d.data.ca_file)).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        d.close()


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    lower, mnt, pw = tmp_path / "vault", tmp_path / "vault.mnt", tmp_path / "vault.pw"
    init_volume(lower, "boot passphrase")
    mnt.mkdir()
    pw.write_text("boot passphrase")
    yield lower, mnt, pw
    subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)


def test_the_mount_unit_execstart_and_execstop(units: Path, tmp_path: Path, volume: tuple[Path, Path, Path]) -> None:
    lower, mnt, pw = volume
    env_file = tmp_path / "vault.env"
    env_file.write_text(
        f"STRONGROOM_VOLUME={lower}\nSTRONGROOM_MOUNTPOINT={mnt}\nSTRONGROOM_PROFILE={tmp_path}\n"
        f'STRONGROOM_MOUNT_OPTIONS="--passphrase-file {pw}"\n'
    )
    unit = _unit(units / "strongroom-mount@.service")
    assert unit["EnvironmentFile"] == ["/etc/strongroom/mounts/%i.env"]
    env = _environment(unit, env_file)
    notify = Notify(tmp_path)
    proc = subprocess.Popen(_command(unit["ExecStart"][0], env), env={**os.environ, "NOTIFY_SOCKET": str(notify.path)})
    try:
        msg = notify.receive()
        assert msg["READY"] == "1" and str(mnt) in msg["STATUS"]
        (mnt / "hello").write_text("from boot")
        assert (mnt / "hello").read_text() == "from boot" and not (lower / "hello").exists()
        subprocess.run(_command(unit["ExecStop"][0], env), check=True)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_mount_a_with_an_fstab_line(tmp_path: Path, volume: tuple[Path, Path, Path]) -> None:
    lower, mnt, pw = volume
    helper = Path("/usr/sbin/mount.strongroom")
    made = not helper.exists()
    if made:
        helper.symlink_to(BIN / "mount.strongroom")
    try:
        fstab = tmp_path / "fstab"
        options = f"passphrase_file={pw},_netdev,nofail,x-systemd.requires=strongroom.service"
        fstab.write_text(f"# a test fstab\n{lower}  {mnt}  strongroom  {options}  0 0\n")
        r = subprocess.run(["mount", "-a", "-T", str(fstab)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert subprocess.run(["findmnt", str(mnt)], capture_output=True).returncode == 0
        (mnt / "f").write_text("via fstab")
        assert cli("fs", "umount", str(mnt)).returncode == 0
        fstab.write_text(f"{lower}  {mnt}  strongroom  passphrase_file={pw},bogus=1  0 0\n")
        r = subprocess.run(["mount", "-a", "-T", str(fstab)], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "unknown option 'bogus'" in r.stderr
    finally:
        if made:
            helper.unlink()
