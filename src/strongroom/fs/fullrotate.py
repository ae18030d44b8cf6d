"""`strongroom fs rotate --full`: every key of an unmounted volume renewed (FORMAT.md §2, §10) --
KEK, name, attribute-name, attribute-value, rules-MAC and dir-ids keys, every file key and file
id -- so that nothing an old key or an old copy of the config opens is left in the volume.

Every name changes with the name key, so the volume is written anew beside itself: a staging
tree (``strongroom.rotate-full.tree``) is built from the old one under the new keys (files
through a temporary copy renamed into place, holes kept; FIFOs, sockets and devices moved, not
copied), then swapped in.  ``strongroom.rotate-full.json`` holds the new config and the phase;
while it exists no mount starts, and running the command again resumes: in the build phase an
entry whose new name exists is done (new names are a function of the plaintext path and the new
keys), in the swap phase each step is repeated until nothing of the old tree is left.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strongroom.fs import acl, config, content, durable, journal, keys, names, reencrypt, sidecar, xattrs
from strongroom.fs.lowerwalk import Tree, remove_tree
from strongroom.fs.volume import FULL_ROTATION, interrupted

STATE = FULL_ROTATION
STAGE = "strongroom.rotate-full.tree"


class RotationError(Exception):
    """The volume cannot be rotated now (what is wrong, and what to do)."""


@dataclass
class FullResult:
    files: int = 0
    bytes: int = 0
    directories: int = 0
    symlinks: int = 0
    special: int = 0


def _load_state(volume: Path) -> dict[str, Any] | None:
    try:
        raw = sidecar.read_bounded(volume / STATE, config.CONFIG_MAX)
        state = None if raw is None else json.loads(raw)
    except (sidecar.UnsafeFile, ValueError) as e:  # a FIFO, a symlink, a damaged file: never guessed at
        raise RotationError(f"{STATE} cannot be read ({e}): restore it or remove the rotation by hand") from None
    if state is not None and (not isinstance(state, dict) or state.get("phase") not in ("build", "swap")):
        raise RotationError(f"{STATE} is not a rotation's state")
    return state


def _save_state(volume: Path, state: dict[str, Any]) -> None:
    durable.replace_file(volume / STATE, (json.dumps(state, indent=2) + "\n").encode())


def _fresh_config(cfg: config.VolumeConfig, old: keys.VolumeKeys, source_keys: list[bytes]) -> tuple[config.VolumeConfig, bytes]:
    """The new config (every key new, the old KEK retired to the ring) and the new root tweak."""
    new = keys.VolumeKeys.fresh(cfg.volume_id, keys.V5)
    sources = [
        {**s, "sealed_kek": config.seal_kek(sk, cfg.volume_id, s["type"], new.kek, keys.V5)}
        for s, sk in zip(cfg.key_sources, source_keys, strict=True)
    ]
    extra = {k: v for k, v in cfg.extra.items() if k != config.RETIRED}
    staged = config.VolumeConfig(
        cfg.volume_id, sources, new.wrapped(), long_name_max=cfg.long_name_max, extra=extra, version=keys.V5
    )
    ring = b"".join([old.kek, *cfg.retired_keks(old.kek)])  # standalone exports stay readable
    staged.extra[config.RETIRED] = names.b64u(keys.wrap(new.kek, config.RETIRED_PURPOSE, cfg.volume_id, ring, salted=True))
    staged.params_mac = staged._mac(new.rules_mac)
    return staged, names.new_diriv()


def count(volume: Path) -> int:
    """Entries the build phase goes through (for a progress bar)."""
    n = 0
    with Tree(volume) as tree:
        for d in tree.walk():
            if not d.rel:
                d.dirnames[:] = [x for x in d.dirnames if x not in (STAGE, journal.DIR)]
            n += sum(1 for x in d.filenames if not names.is_reserved(x) and not x.endswith(names.LONG_SUFFIX) and not _kept(x))
    return n


def rotate_full(
    volume: Path, source_keys: Callable[[dict[str, Any]], bytes], progress: Callable[[int], None] = lambda n: None
) -> FullResult:
    """``source_keys(source)`` gives each key source's 32-byte source key (every one is sealed
    again)."""
    cfg = config.VolumeConfig.load(volume)
    if (pending := interrupted(volume, cfg, besides="rotate --full")) is not None:
        raise RotationError(pending)
    sks = [source_keys(s) for s in cfg.key_sources]
    for s, sk in zip(cfg.key_sources, sks, strict=True):  # every secret must be the right one
        cfg.unlock_with_source_key(s, sk)
    state = _load_state(volume)
    if state is None:
        old = cfg.unlock_with_source_key(cfg.key_sources[0], sks[0])
        staged, root_iv = _fresh_config(cfg, old, sks)
        state = {"phase": "build", "config": staged.to_json(), "root_iv": names.b64u(root_iv)}
        _save_state(volume, state)
    staged = config.VolumeConfig.from_json(state["config"], str(volume / STATE))
    new = staged.unlock_with_source_key(staged.key_sources[0], sks[0])
    result = FullResult()
    if state["phase"] == "build":
        old = cfg.unlock_with_source_key(cfg.key_sources[0], sks[0])
        (volume / STAGE).mkdir(mode=0o700, exist_ok=True)
        build = _Build(volume, cfg, old, new, names.unb64u(state["root_iv"]), progress, result)
        build.run()
        os.sync()  # the whole new tree durable before the old one goes
        state["phase"] = "swap"
        state["specials"] = build.specials
        state["old"] = sorted(n for n in os.listdir(volume) if not _kept(n))
        _save_state(volume, state)
    _swap(volume, state, cfg.unlock_with_source_key(cfg.key_sources[0], sks[0]), staged, new)
    return result


def abort(volume: Path) -> bool:
    """Forget a full rotation still building (the old tree and config were not changed); False
    when there is none.  One that is swapping cannot be taken back, only finished."""
    state = _load_state(volume)
    if state is None:
        return False
    if state["phase"] != "build":
        raise RotationError("the rotation is swapping the new tree in: run 'strongroom fs rotate --full' to finish it")
    if (volume / STAGE).is_dir():
        remove_tree(volume / STAGE)
    os.unlink(volume / STATE)
    durable.fsync_dir(volume)
    return True


def _kept(name: str) -> bool:
    """Root entries that are no part of the old tree."""
    return name in (STATE, STAGE, names.DIRIV, journal.DIR, acl.RULES_FILE) or name.startswith(config.CONFIG)


def _swap(volume: Path, state: dict[str, Any], old: keys.VolumeKeys, staged: config.VolumeConfig, new: keys.VolumeKeys) -> None:
    """Old tree out, new tree in, then the root's tweak, attributes and rules, then the config:
    each step repeatable (``old`` is the config's keys at the time: after a crash past the
    config's replacement, the new ones)."""
    stage = volume / STAGE
    for old_rel, new_rel in state.get("specials", []):  # FIFOs, sockets, devices: moved, not copied
        if os.path.lexists(volume / old_rel):
            os.rename(volume / old_rel, stage / new_rel)
    for name in state["old"]:  # the old tree goes (the new one is whole and durable in the stage)
        path = volume / name
        if path.is_dir() and not path.is_symlink():
            remove_tree(path)
        elif os.path.lexists(path):
            os.unlink(path)
    if stage.is_dir():
        for name in sorted(os.listdir(stage)):
            os.rename(stage / name, volume / name)
        root = f"{volume}/."
        for lower in os.listxattr(root):  # the root's own attributes, sealed anew in the stage
            if lower.startswith(xattrs.PREFIX):
                os.removexattr(root, lower)
        for lower in os.listxattr(stage):
            os.setxattr(root, lower, os.getxattr(stage, lower))
    tweaks = names.Tweaks(keys.V5, new.dir_ids, new.volume_id)
    durable.replace_file(volume / names.DIRIV, tweaks.record(names.unb64u(state["root_iv"]), None, ""), 0o400)
    _remac_rules(volume, old, new)
    durable.replace_file(volume / config.CONFIG, (json.dumps(staged.to_json(), indent=2) + "\n").encode())
    if stage.is_dir():
        os.rmdir(stage)
    os.unlink(volume / STATE)
    durable.fsync_dir(volume)


def _remac_rules(volume: Path, old: keys.VolumeKeys, new: keys.VolumeKeys) -> None:
    """The access rules under the new rules-MAC key, same serial; rules that do not verify
    under the old key are refused, never blessed with the new one."""
    try:
        if acl.load_rules(volume, new.rules_mac) is not None:
            return  # done (or the same key: a resumed pass)
    except acl.AclError:
        pass
    try:
        rs = acl.load_rules(volume, old.rules_mac)
    except acl.AclError as e:
        raise RotationError(f"the access rules do not verify ({e}); fix them before rotating") from None
    if rs is None:
        return
    body = json.loads(rs.canonical())
    body["mac"] = rs.mac(new.rules_mac)
    durable.replace_file(volume / acl.RULES_FILE, (json.dumps(body, indent=2) + "\n").encode())


class _Build:
    def __init__(
        self,
        volume: Path,
        cfg: config.VolumeConfig,
        old: keys.VolumeKeys,
        new: keys.VolumeKeys,
        root_iv: bytes,
        progress: Callable[[int], None],
        result: FullResult,
    ) -> None:
        self.volume = volume
        self.old, self.new = old, new
        self.holes = cfg.holes
        self.old_bound = cfg.bound_xattrs
        self.old_names = names.NameCipher(old.names, cfg.long_name_max)
        self.new_names = names.NameCipher(new.names, cfg.long_name_max)
        self.old_tweaks = names.Tweaks(cfg.version, old.dir_ids, old.volume_id)
        self.new_tweaks = names.Tweaks(keys.V5, new.dir_ids, new.volume_id)
        self.old_values = xattrs.XattrCipher(old.xattr_names, old.xattr_values, old.salted)
        self.new_values = xattrs.XattrCipher(new.xattr_names, new.xattr_values, True)
        self.root_iv = root_iv
        self.progress = progress
        self.result = result
        self.links: dict[int, Path] = {}  # an old inode -> its first new name
        self.specials: list[tuple[str, str]] = []  # (old path, new path in the stage) of each special file
        self.dirs: list[tuple[Path, os.stat_result]] = []  # new directories, their metadata set last

    def run(self) -> None:
        stage = self.volume / STAGE
        # old rel -> (old tweak, new directory path, new tweak)
        where: dict[str, tuple[bytes, Path, bytes]] = {}
        with Tree(self.volume) as tree:
            for d in tree.walk():
                if not d.rel:
                    for skip in (STAGE, journal.DIR):
                        if skip in d.dirnames:
                            d.dirnames.remove(skip)
                    old_iv = self._old_tweak(d.here, None, "")
                    where[""] = (old_iv, stage, self.root_iv)
                    self._attributes(f"{d.here}/.", stage, xattrs.dir_binding(old_iv), xattrs.dir_binding(self.root_iv))
                old_iv, new_dir, new_iv = where[d.rel]
                _clear_temporaries(new_dir)
                for n in d.dirnames:
                    plain = self._plain(d.here, n, old_iv)
                    child_old_iv = self._old_tweak(d.here / n, old_iv, n)
                    lower, full = self._new_name(new_dir, plain, new_iv)
                    child = new_dir / lower
                    try:
                        child.mkdir(mode=0o700)
                    except FileExistsError:
                        os.chmod(child, 0o700)  # its mode is set last (a resumed pass writes into it)
                    child_new_iv = self.new_tweaks.derive(new_iv, lower)
                    self._attributes(f"{d.here / n}/.", child, xattrs.dir_binding(child_old_iv), xattrs.dir_binding(child_new_iv))
                    self.dirs.append((child, os.lstat(d.here / n)))
                    where[d.rel_of(n)] = (child_old_iv, child, child_new_iv)
                    self.result.directories += 1
                for n in d.filenames:
                    if names.is_reserved(n) or n.endswith(names.LONG_SUFFIX) or (not d.rel and _kept(n)):
                        continue
                    plain = self._plain(d.here, n, old_iv)
                    lower, _ = self._new_name(new_dir, plain, new_iv)
                    try:
                        self._entry(d.here / n, new_dir / lower, d.rel_of(n))
                    except (sidecar.UnsafeFile, content.DamagedFile, names.BadName) as e:
                        raise RotationError(f"{d.rel_of(n)}: {e}; run 'strongroom fs fsck' first, then rotate again") from None
                    self.progress(1)
        for path, st in reversed(self.dirs):  # deepest first: setting a mode may close a directory
            os.chown(path, st.st_uid, st.st_gid)
            os.chmod(path, stat.S_IMODE(st.st_mode))
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    # -- names and tweaks ----------------------------------------------------------------
    def _old_tweak(self, lower_dir: Path, parent: bytes | None, own: str) -> bytes:
        raw = sidecar.read_bounded(lower_dir / names.DIRIV, self.old_tweaks.stored_max)
        try:
            if raw is not None:
                return self.old_tweaks.read(raw, parent, own)
        except names.BadName as e:
            raise RotationError(f"{lower_dir}: {e}; run 'strongroom fs fsck' first") from None
        if parent is None or not self.old_tweaks.derived:
            raise RotationError(f"{lower_dir}: directory tweak missing; run 'strongroom fs fsck' first")
        return self.old_tweaks.derive(parent, own)

    def _plain(self, lower_dir: Path, entry: str, iv: bytes) -> bytes:
        try:
            long = names.is_long(entry)
            text = entry
            if long:
                text = names.sidecar_text(
                    entry, sidecar.read_bounded(lower_dir / (entry + names.LONG_SUFFIX), names.LONG_SIDECAR_MAX)
                )
            self.old_names.check_form(text, long)
            return self.old_names.decrypt(text, iv)
        except (names.BadName, sidecar.UnsafeFile) as e:
            raise RotationError(f"{lower_dir / entry}: {e}; run 'strongroom fs fsck' first") from None

    def _new_name(self, new_dir: Path, plain: bytes, iv: bytes) -> tuple[str, str | None]:
        lower, full = self.new_names.lower_name(plain, iv)
        if full is not None and not (new_dir / (lower + names.LONG_SUFFIX)).exists():
            durable.replace_file(new_dir / (lower + names.LONG_SUFFIX), full.encode(), 0o400)
        return lower, full

    # -- entries -------------------------------------------------------------------------
    def _entry(self, old: Path, new: Path, old_rel: str) -> None:
        st = os.lstat(old)
        if stat.S_ISREG(st.st_mode):
            if st.st_nlink > 1 and st.st_ino in self.links:
                if not os.path.lexists(new):
                    os.link(self.links[st.st_ino], new)
                return
            if st.st_nlink > 1:
                self.links[st.st_ino] = new
            if not os.path.lexists(new):
                self._file(old, new, st)
        elif stat.S_ISLNK(st.st_mode):
            if not os.path.lexists(new):
                self._symlink(old, new, st)
        else:  # a FIFO, socket or device: the inode itself moves there, in the swap
            self.specials.append((old_rel, str(new.relative_to(self.volume / STAGE))))
            self.result.special += 1

    def _file(self, old: Path, new: Path, st: os.stat_result) -> None:
        src = sidecar.open_regular(old, os.O_RDONLY)
        tmp = new.with_name(f"{reencrypt.TMP_PREFIX}{names.b64u(os.urandom(9))}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            old_binding: bytes = xattrs.EMPTY
            new_binding: bytes = xattrs.EMPTY
            if st.st_size:
                header = content.FileHeader.fresh(keys.FILE)
                total, old_id = reencrypt.copy_content(
                    src, fd, content.plain_size(st.st_size), self.old, header, self.holes, self.new
                )
                old_binding, new_binding = xattrs.file_binding(old_id), xattrs.file_binding(header.file_id)
                self.result.bytes += total
            self._attributes(src, fd, old_binding, new_binding)
            reencrypt.finish_copy(fd, st)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        finally:
            os.close(src)
        os.close(fd)
        os.rename(tmp, new)
        self.result.files += 1

    def _symlink(self, old: Path, new: Path, st: os.stat_result) -> None:
        sealed = names.unb64u(os.readlink(old))
        try:
            header = content.FileHeader.decode(
                sealed[: content.HEADER], self.old.kek, self.old.volume_id, self.old.kind(keys.SYMLINK)
            )
            target = content.FileCipher(header).open(0, sealed[content.HEADER :])
        except content.DamagedFile as e:
            raise RotationError(f"{old}: {e}; run 'strongroom fs fsck' first") from None
        fresh = content.FileHeader.fresh(keys.SYMLINK)
        tmp = new.with_name(f"{reencrypt.TMP_PREFIX}{names.b64u(os.urandom(9))}")
        os.symlink(names.b64u(fresh.encode(self.new.kek, self.new.volume_id) + content.FileCipher(fresh).seal(0, target)), tmp)
        os.chown(tmp, st.st_uid, st.st_gid, follow_symlinks=False)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
        os.rename(tmp, new)
        self.result.symlinks += 1

    def _attributes(self, src: str | int | Path, dst: str | int | Path, old_binding: bytes, new_binding: bytes) -> None:
        for lower in os.listxattr(src):
            if not lower.startswith(xattrs.PREFIX):
                os.setxattr(dst, lower, os.getxattr(src, lower))  # another program's: kept as it is
                continue
            try:
                plain_name = self.old_values.plain_name(lower)
                value = self.old_values.open_value(lower, os.getxattr(src, lower), old_binding if self.old_bound else None)
            except (names.BadName, keys.WrongKey):
                raise RotationError(f"{src}: an extended attribute does not open; run 'strongroom fs fsck' first") from None
            new_lower = self.new_values.lower_name(plain_name)
            os.setxattr(dst, new_lower, self.new_values.seal_value(new_lower, value, new_binding))


def _clear_temporaries(directory: Path) -> None:
    """Copies an interrupted build left (whole files only reach their names by a rename)."""
    try:
        for name in os.listdir(directory):
            if name.startswith(reencrypt.TMP_PREFIX):
                os.unlink(directory / name)
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise
