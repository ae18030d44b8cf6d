"""Real mounts for the tests: a volume in a temp dir, served by `strongroom fs mount --foreground`
in its own process, unmounted (or cleaned up after a kill) at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from strongroom.fs import config, durable, keys, mount, names
from strongroom.fs.volume import init_volume

PASSPHRASE = "volume passphrase"


class Mount:
    def __init__(self, root: Path, name: str = "vol") -> None:
        self.lower = root / name
        self.mnt = root / (name + ".mnt")
        self.mnt.mkdir(exist_ok=True)
        self.pwfile = root / (name + ".pw")
        self.pwfile.write_text(PASSPHRASE)
        self.log = root / (name + ".log")
        self.proc: subprocess.Popen[bytes] | None = None

    def init(self) -> Mount:
        init_volume(self.lower, PASSPHRASE)
        return self

    def as_version(self, version: int) -> Mount:
        """Make the (new, unmounted) volume one of an older format version, as an older
        Strongroom would have made it (the version is covered by the parameters' MAC)."""
        cfg = config.VolumeConfig.load(self.lower)
        vk = cfg.unlock_passphrase(PASSPHRASE)
        if version < keys.V5 <= cfg.version:  # unsalted seals, no dir-ids key, a bare root tweak
            old = keys.VolumeKeys(vk.volume_id, vk.kek, vk.names, vk.xattr_names, vk.xattr_values, vk.rules_mac, version=version)
            cfg.wrapped = old.wrapped()
            cfg.key_sources = [config.passphrase_source(vk.kek, vk.volume_id, PASSPHRASE, version=version)]
            durable.replace_file(self.lower / names.DIRIV, (self.lower / names.DIRIV).read_bytes()[: names.DIRIV_BYTES], 0o400)
        cfg.version = version
        cfg.params_mac = cfg._mac(vk.rules_mac)
        cfg.save(self.lower)
        return self

    def name_cipher(self) -> names.NameCipher:
        return names.NameCipher(config.VolumeConfig.load(self.lower).unlock_passphrase(PASSPHRASE).names)

    def lower_of(self, plain: str, directory: Path | None = None) -> Path:
        """The lower entry of the plaintext name ``plain`` in the lower directory ``directory``
        (the root by default; it must store its tweak, as the root does)."""
        directory = directory or self.lower
        iv = (directory / names.DIRIV).read_bytes()[: names.DIRIV_BYTES]  # (version 5: its tags follow)
        return directory / self.name_cipher().lower_name(plain.encode(), iv)[0]

    def start(self, *extra: str) -> Mount:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "strongroom.cli.main", "fs", "mount", str(self.lower), str(self.mnt), "--foreground"]
                + ["--passphrase-file", str(self.pwfile), *extra],
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + 20
        while mount.mounted_at(self.mnt) is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mount exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("mount did not come up")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if mount.mounted_at(self.mnt) is not None:
            subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:  # the unmount was refused (busy): no dead mount left behind
            self.proc.kill()
            self.proc.wait()
            subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], capture_output=True)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL the daemon, then clear the dead mount (as an operator would)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], capture_output=True)
        self.proc = None

    def restart(self) -> Mount:
        self.stop()
        return self.start()

    def lower_files(self) -> list[Path]:
        return [p for p in self.lower.rglob("*") if p.is_file() and not p.name.startswith("strongroom.")]


def lower_digest(lower: Path) -> dict[str, bytes]:
    """Every lower entry's bytes (a symlink's target, a file's content and attributes, another
    entry's mode): equal digests mean a lower tree left exactly as it was."""
    out = {}
    for p in sorted(lower.rglob("*")):
        if p.is_symlink():
            out[str(p)] = os.readlink(p).encode()
        elif p.is_file():
            out[str(p)] = p.read_bytes() + repr(sorted((a, os.getxattr(p, a)) for a in os.listxattr(p))).encode()
        else:
            out[str(p)] = oct(p.lstat().st_mode).encode()
    return out
