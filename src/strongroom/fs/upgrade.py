"""`strongroom fs upgrade`: an unmounted volume of format version 1-4 moved to version 5 in place
(FORMAT.md §9), keeping every key but adding the dir-ids key; safe to interrupt at any point and
resumable.

The version-5 config is staged first (``strongroom.upgrade.json``: while it exists no mount
starts), then every lower object is rewritten in its version-5 form, each one atomically or under
a journal record written before it: a directory's tweak is stored with its tag (a new file,
renamed into place), a symlink made anew and renamed over the old one, an attribute value set
again (one setxattr), and a file's 84-byte header rewritten in place after its old bytes are
journalled (``strongroom.upgrade.journal``), so a torn write can be undone.  A resumed pass knows
each object's state from the object (a header's version, a tweak's size, which rule opens a
value).  Last, the lower file system is synced and the staged config renamed over the config.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strongroom.crypto.kdf import MEMORY_KIB_FLOOR
from strongroom.fs import config, content, durable, journal, keys, names, reencrypt, sidecar, xattrs
from strongroom.fs.lowerwalk import Tree
from strongroom.fs.volume import UPGRADE_STAGED, interrupted

STAGED = UPGRADE_STAGED
JOURNAL = "strongroom.upgrade.journal"


class UpgradeError(Exception):
    """The volume cannot be upgraded now (say why and what to do)."""


@dataclass
class UpgradeResult:
    directories: int = 0
    headers: int = 0
    symlinks: int = 0
    attributes: int = 0
    already: bool = False


def in_progress(volume: Path) -> bool:
    return os.path.lexists(volume / STAGED)


Renew = Callable[[dict[str, Any], bytes], dict[str, Any]]


def _staged(volume: Path, cfg: config.VolumeConfig, source_keys: list[bytes], renew: Renew | None) -> config.VolumeConfig:
    """The version-5 config, from the one the volume has (written once, then reused)."""
    if in_progress(volume):
        try:
            raw = sidecar.read_bounded(volume / STAGED, config.CONFIG_MAX)
            if raw is None:
                raise UpgradeError(f"{volume / STAGED} vanished")
            return config.VolumeConfig.from_json(json.loads(raw), str(volume / STAGED))
        except (sidecar.UnsafeFile, ValueError, config.ConfigError) as e:  # a FIFO, a symlink, damage
            raise UpgradeError(f"{STAGED} cannot be read ({e}): restore it or remove it by hand") from None
    old = cfg.unlock_with_source_key(cfg.key_sources[0], source_keys[0])
    new = keys.VolumeKeys.of(
        cfg.volume_id, old.kek, {p: old.by_purpose(p) for p in keys.PURPOSES} | {"dir-ids": os.urandom(32)}, keys.V5
    )
    sources = []
    for s, sk in zip(cfg.key_sources, source_keys, strict=True):
        if s["type"] == "passphrase" and s["kdf"]["memory_kib"] < MEMORY_KIB_FLOOR:
            if renew is None:
                raise UpgradeError(
                    f"a passphrase key source uses less than version 5's {MEMORY_KIB_FLOOR} KiB of Argon2id memory"
                )
            sources.append(renew(s, new.kek))  # the same passphrase, fresh parameters
        else:
            sources.append({**s, "sealed_kek": config.seal_kek(sk, cfg.volume_id, s["type"], new.kek, keys.V5)})
    ring = cfg.retired_keks(old.kek)
    extra = dict(cfg.extra)
    staged = config.VolumeConfig(
        cfg.volume_id, sources, new.wrapped(), long_name_max=cfg.long_name_max, extra=extra, version=keys.V5
    )
    if ring:
        extra[config.RETIRED] = names.b64u(keys.wrap(new.kek, config.RETIRED_PURPOSE, cfg.volume_id, b"".join(ring), salted=True))
    staged.params_mac = staged._mac(new.rules_mac)
    durable.replace_file(volume / STAGED, (json.dumps(staged.to_json(), indent=2) + "\n").encode())
    return staged


def upgrade(
    volume: Path,
    source_keys: Callable[[dict[str, Any]], bytes],
    progress: Callable[[int], None] = lambda n: None,
    renew: Renew | None = None,
) -> UpgradeResult:
    """``source_keys(source)`` gives each key source's 32-byte source key (every source is sealed
    again, as a rotation does); ``renew(source, kek)`` a passphrase source made anew with today's
    Argon2id parameters, for one below version 5's floor."""
    cfg = config.VolumeConfig.load(volume)
    if cfg.version >= keys.V5 and not in_progress(volume):
        return UpgradeResult(already=True)
    if (pending := interrupted(volume, cfg, besides="upgrade")) is not None:
        raise UpgradeError(pending)
    if cfg.version >= keys.V5:  # the config was committed; only the cleanup is left
        _finish(volume)
        return UpgradeResult(already=True)
    sks = [source_keys(s) for s in cfg.key_sources]
    for s, sk in zip(cfg.key_sources, sks, strict=True):  # every secret must be the right one
        cfg.unlock_with_source_key(s, sk)
    if not in_progress(volume):  # every object read first: a damaged one refuses the upgrade untouched
        old = cfg.unlock_with_source_key(cfg.key_sources[0], sks[0])
        trial = keys.VolumeKeys.of(
            cfg.volume_id, old.kek, {p: old.by_purpose(p) for p in keys.PURPOSES} | {"dir-ids": bytes(32)}, keys.V5
        )
        _Pass(volume, cfg, trial, lambda n: None, dry=True).run()
    staged = _staged(volume, cfg, sks, renew)
    new = staged.unlock_with_kek(cfg.unlock_with_source_key(cfg.key_sources[0], sks[0]).kek)  # the KEK stays
    result = _Pass(volume, cfg, new, progress).run()
    os.sync()  # every rewritten header durable before the config says version 5
    durable.replace_file(volume / config.CONFIG, (json.dumps(staged.to_json(), indent=2) + "\n").encode())
    _finish(volume)
    return result


def _finish(volume: Path) -> None:
    for name in (JOURNAL, STAGED):
        try:
            os.unlink(volume / name)
        except FileNotFoundError:
            pass
    durable.fsync_dir(volume)


class _Pass:
    def __init__(
        self, volume: Path, cfg: config.VolumeConfig, new: keys.VolumeKeys, progress: Callable[[int], None], dry: bool = False
    ) -> None:
        """``dry``: every object read and checked, nothing written."""
        self.dry = dry
        self.volume = volume
        self.new = new
        self.old_tweaks = names.Tweaks(cfg.version)
        self.new_tweaks = names.Tweaks(keys.V5, new.dir_ids, new.volume_id)
        self.old_bound = cfg.bound_xattrs
        self.old_values = xattrs.XattrCipher(new.xattr_names, new.xattr_values)
        self.new_values = xattrs.XattrCipher(new.xattr_names, new.xattr_values, salted=True)
        self.progress = progress
        self.result = UpgradeResult()
        self.journalled = self._journalled()

    def _journalled(self) -> dict[int, bytes]:
        """Old headers recorded before their rewrite, by lower inode (a torn write is undone)."""
        out: dict[int, bytes] = {}
        try:
            raw = sidecar.read_bounded(self.volume / JOURNAL, 1 << 30) or b""
        except sidecar.UnsafeFile as e:
            raise UpgradeError(f"{JOURNAL} cannot be read ({e})") from None
        for line in raw.splitlines():
            try:
                record = json.loads(line)
                out[int(record["ino"])] = base64.urlsafe_b64decode(record["header"])
            except (ValueError, KeyError, TypeError):
                break  # a torn last line: its header was never written
        return out

    def run(self) -> UpgradeResult:
        tweaks: dict[str, bytes] = {}
        with Tree(self.volume) as tree:
            for d in tree.walk():
                if d.rel == "" and journal.DIR in d.dirnames:  # the shrink journal (empty: checked)
                    d.dirnames.remove(journal.DIR)
                parent = tweaks.get(d.rel.rpartition("/")[0]) if d.rel else None
                own = d.rel.rpartition("/")[2]
                iv = self._refusing(d.rel or ".", self._directory, d.here, parent, own)
                tweaks[d.rel] = iv
                self._attributes(f"{d.here}/.", xattrs.dir_binding(iv))  # "/.": the directory, not /proc's link
                for n in d.filenames:
                    if names.is_reserved(n) or n.endswith(names.LONG_SUFFIX) or (not d.rel and n.startswith(config.CONFIG)):
                        continue
                    self._refusing(d.rel_of(n), self._entry, d.here / n)
                    self.progress(1)
        return self.result

    @staticmethod
    def _refusing(where: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``; an object that is damaged or not what it should be stops the pass
        (every object is whole in either form, so it resumes once fsck's findings are dealt with)."""
        try:
            return fn(*args)
        except (names.BadName, sidecar.UnsafeFile, content.DamagedFile) as e:
            raise UpgradeError(f"{where}: {e}; run 'strongroom fs fsck' first, then upgrade again") from None

    # -- directories -------------------------------------------------------------------
    def _directory(self, here: Path, parent: bytes | None, own: str) -> bytes:
        raw = sidecar.read_bounded(here / names.DIRIV, self.new_tweaks.stored_max)
        if raw is not None and len(raw) != names.DIRIV_BYTES:
            return self.new_tweaks.read(raw, parent, own)  # done by an earlier pass
        if raw is not None:
            iv = self.old_tweaks.read(raw, parent, own)
        elif parent is None or not self.old_tweaks.derived:
            raise UpgradeError(f"{here}: directory tweak missing; run 'strongroom fs fsck' first")
        else:
            iv = self.old_tweaks.derive(parent, own)
        if self.dry:
            return iv
        mode = stat.S_IMODE(os.stat(here).st_mode)
        if mode & 0o300 != 0o300:  # a directory without owner write access keeps its mode
            os.chmod(here, mode | 0o300)
        try:
            durable.replace_file(here / names.DIRIV, self.new_tweaks.record(iv, parent, own), 0o400)
        finally:
            if mode & 0o300 != 0o300:
                os.chmod(here, mode)
        self.result.directories += 1
        return iv

    # -- entries -----------------------------------------------------------------------
    def _entry(self, path: Path) -> None:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            self._symlink(path)
        elif stat.S_ISREG(st.st_mode):
            if st.st_size == 0:
                self._attributes(str(path), xattrs.EMPTY)
                return
            fd = sidecar.open_regular(path, os.O_RDONLY if self.dry else os.O_RDWR)
            try:
                raw = os.pread(fd, content.HEADER, 0)
                self._header(fd, st.st_ino, raw)
                self._attributes(str(path), xattrs.file_binding(raw[8 : content.PREFIX]))
            finally:
                os.close(fd)

    def _header(self, fd: int, ino: int, raw: bytes) -> None:
        if raw[4:8] == b"\x00\x02\x00\x01":  # version 5's header of file content: done
            try:
                content.FileHeader.decode(raw, self.new.kek, self.new.volume_id, keys.FILE)
                return
            except content.DamagedFile:
                pass
        try:
            header = content.FileHeader.decode(raw, self.new.kek, self.new.volume_id)
            if self.dry:
                return
            self._journal(ino, raw)
        except content.DamagedFile:
            old = self.journalled.get(ino)
            if old is None:
                raise UpgradeError(f"a file header does not authenticate (inode {ino}): run 'strongroom fs fsck' first") from None
            header = content.FileHeader.decode(old, self.new.kek, self.new.volume_id)  # a torn rewrite, redone
        new = content.FileHeader(header.file_id, header.file_key, keys.FILE).encode(self.new.kek, self.new.volume_id)
        os.pwrite(fd, new, 0)
        self.result.headers += 1

    def _journal(self, ino: int, raw: bytes) -> None:
        """Record the old header, durably, before it is overwritten."""
        line = json.dumps({"ino": ino, "header": base64.urlsafe_b64encode(raw).decode()}) + "\n"
        fd = os.open(self.volume / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, line.encode())
            os.fdatasync(fd)
        finally:
            os.close(fd)
        self.journalled[ino] = raw

    def _symlink(self, path: Path) -> None:
        target = os.readlink(path)
        sealed = names.unb64u(target)
        try:
            content.FileHeader.decode(sealed[: content.HEADER], self.new.kek, self.new.volume_id, keys.SYMLINK)
            return  # done by an earlier pass
        except content.DamagedFile:
            pass
        header = content.FileHeader.decode(sealed[: content.HEADER], self.new.kek, self.new.volume_id)
        if self.dry:
            return
        new = content.FileHeader(header.file_id, header.file_key, keys.SYMLINK).encode(self.new.kek, self.new.volume_id)
        tmp = path.with_name(f"{reencrypt.TMP_PREFIX}{names.b64u(os.urandom(9))}")
        os.symlink(names.b64u(new + sealed[content.HEADER :]), tmp)
        os.replace(tmp, path)
        self.result.symlinks += 1

    # -- extended attributes -------------------------------------------------------------
    def _attributes(self, node: str, binding: bytes) -> None:
        for lower in os.listxattr(node, follow_symlinks=False):
            if not lower.startswith(xattrs.PREFIX):
                continue
            value = os.getxattr(node, lower, follow_symlinks=False)
            try:
                self.new_values.open_value(lower, value, binding)
                continue  # done by an earlier pass
            except keys.WrongKey:
                pass
            try:
                plain = self.old_values.open_value(lower, value, binding if self.old_bound else None)
            except keys.WrongKey:
                continue  # damaged before: stays damaged, fsck names it
            if self.dry:
                continue
            os.setxattr(node, lower, self.new_values.seal_value(lower, plain, binding), follow_symlinks=False)
            self.result.attributes += 1
