"""Re-encryption (`strongroom fs reencrypt`): every file and symlink gets a new file id and file
key and its data is rewritten -- the answer to a leaked file key, which KEK rotation cannot
undo (FORMAT.md §2).  Resumable and crash-safe:

each file is written anew beside the old one (a `strongroom.tmp.*` name in the same lower
directory), made durable, then renamed over it, so at every moment each name holds a whole file
under one key; hard-linked names are replaced one by one from the first new copy.  Finished
inodes are appended to a journal in the volume (`strongroom.reencrypt.journal`, fsync'd), so a
rerun skips them; the journal is removed when the pass completes.
"""

from __future__ import annotations

import base64
import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strongroom.fs import config, content, durable, names, xattrs
from strongroom.fs import keys as keys_mod
from strongroom.fs.keys import VolumeKeys
from strongroom.fs.rotate import lower_entries

JOURNAL = "strongroom.reencrypt.journal"
PIECE_BLOCKS = 256


@dataclass
class ReencryptResult:
    files: int = 0
    symlinks: int = 0
    skipped: int = 0
    bytes: int = 0


def _tmp_name(directory: Path) -> Path:
    return directory / f"strongroom.tmp.{names.b64u(os.urandom(9))}"


def reencrypt(volume: Path, keys: VolumeKeys, progress: Callable[[int], None] = lambda n: None) -> ReencryptResult:
    journal_path = volume / JOURNAL
    done: set[str] = set()
    if journal_path.exists():
        done = set(journal_path.read_text().split())
    for stale in volume.rglob("strongroom.tmp.*"):  # copies left by an interrupted run
        stale.unlink()
    groups: dict[tuple[int, int], list[Path]] = defaultdict(list)
    for path in lower_entries(volume):
        st = path.lstat()
        groups[(st.st_dev, st.st_ino)].append(path)
    result = ReencryptResult()
    bound = config.VolumeConfig.load(volume).bound_xattrs
    with open(journal_path, "a") as journal:
        for names_of_inode in groups.values():
            first = names_of_inode[0]
            key = str(first.relative_to(volume))
            if key in done:
                result.skipped += 1
                progress(1)
                continue
            if first.is_symlink():
                _symlink(first, keys)
                result.symlinks += 1
            else:
                result.bytes += _file(names_of_inode, keys, bound)
                result.files += 1
            journal.write(key + "\n")
            journal.flush()
            os.fsync(journal.fileno())
            progress(1)
    journal_path.unlink()
    durable.fsync_dir(volume)
    return result


def _file(paths: list[Path], keys: VolumeKeys, bound_xattrs: bool) -> int:
    first = paths[0]
    st = first.lstat()
    tmp = _tmp_name(first.parent)
    total = 0
    with open(first, "rb") as src:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, st.st_mode & 0o7777)
        rebind = None
        try:
            if st.st_size:
                old = content.FileCipher(content.FileHeader.decode(src.read(content.HEADER), keys.kek, keys.volume_id))
                header = content.FileHeader.fresh()
                if bound_xattrs:  # attribute values follow the file to its new id
                    rebind = (xattrs.file_binding(old.file_id), xattrs.file_binding(header.file_id))
                new = content.FileCipher(header)
                os.write(fd, header.encode(keys.kek, keys.volume_id))
                index = 0
                while chunk := src.read(PIECE_BLOCKS * content.CBLOCK):
                    plain = old.open(index, chunk)  # DamagedFile stops the run: fsck first
                    os.write(fd, new.seal(index, plain))
                    total += len(plain)
                    index += PIECE_BLOCKS
            cipher = xattrs.XattrCipher(keys.xattr_names, keys.xattr_values)
            for attr in os.listxattr(first):
                value = os.getxattr(first, attr)
                if rebind is not None and attr.startswith(xattrs.PREFIX):
                    try:
                        value = cipher.seal_value(attr, cipher.open_value(attr, value, rebind[0]), rebind[1])
                    except keys_mod.WrongKey:
                        pass  # damaged before: copied as it is, still damaged (fsck names it)
                os.setxattr(tmp, attr, value)
            os.fchown(fd, st.st_uid, st.st_gid)
            os.fchmod(fd, st.st_mode & 0o7777)
            os.fsync(fd)
        finally:
            os.close(fd)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, first)
    durable.fsync_dir(first.parent)
    for other in paths[1:]:  # the other names of a hard-linked file, one atomic swap each
        link_tmp = _tmp_name(other.parent)
        os.link(first, link_tmp)
        os.replace(link_tmp, other)
        durable.fsync_dir(other.parent)
    return total


def _symlink(path: Path, keys: VolumeKeys) -> None:
    raw = os.readlink(path)
    sealed = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
    old = content.FileCipher(content.FileHeader.decode(sealed[: content.HEADER], keys.kek, keys.volume_id))
    target = old.open(0, sealed[content.HEADER :])
    header = content.FileHeader.fresh()
    new = header.encode(keys.kek, keys.volume_id) + content.FileCipher(header).seal(0, target)
    tmp = _tmp_name(path.parent)
    os.symlink(base64.urlsafe_b64encode(new).rstrip(b"=").decode(), tmp)
    os.replace(tmp, path)
    durable.fsync_dir(path.parent)
