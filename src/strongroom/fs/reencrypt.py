"""Re-encryption (`strongroom fs reencrypt`): every file and symlink gets a new file id and file
key and its data is rewritten -- the answer to a leaked file key, which KEK rotation cannot
undo (FORMAT.md §2).  Resumable and crash-safe:

each file is written anew beside the old one (a `strongroom.tmp.*` name in the same lower
directory), made durable, then renamed over it, so at every moment each name holds a whole file
under one key; hard-linked names are replaced one by one from the first new copy.  Only the old
file's data is read and written: its holes (SEEK_DATA/SEEK_HOLE, and blocks stored as zeros) stay
holes, so a sparse file costs what it holds.  FIFOs, sockets and device nodes hold no data and no
key: they are left as they are, never opened.  Finished inodes are appended to a journal in the
volume (`strongroom.reencrypt.journal`, one JSON line each, fsync'd), so a rerun skips them; the
journal is removed when the pass completes.  A failure removes the copy being written and keeps
the journal, so a rerun resumes; `abort` forgets the journal and any copy instead (every file is
whole under its old or its new key either way).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import stat
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strongroom.fs import config, content, durable, names, sidecar, xattrs
from strongroom.fs import keys as keys_mod
from strongroom.fs.keys import FILE, SYMLINK, VolumeKeys
from strongroom.fs.lowerwalk import Tree
from strongroom.fs.rotate import lower_entries
from strongroom.fs.volume import REENCRYPT_JOURNAL

JOURNAL = REENCRYPT_JOURNAL
JOURNAL_MAX = 256 << 20  # bytes: a line per file of the volume
TMP_PREFIX = "strongroom.tmp."
PIECE_BLOCKS = 256


@dataclass
class ReencryptResult:
    files: int = 0
    symlinks: int = 0
    special: int = 0  # FIFOs, sockets, device nodes: left as they are
    skipped: int = 0
    bytes: int = 0


class ReencryptError(Exception):
    """The pass stopped; the volume is whole (every file under its old or its new key)."""


def _tmp_name(directory: Path) -> Path:
    return directory / f"{TMP_PREFIX}{names.b64u(os.urandom(9))}"


def _remove_stale_copies(volume: Path) -> int:
    """Remove the copies an interrupted pass left (in a tree of any depth); how many."""
    gone = 0
    with Tree(volume) as tree:
        for d in tree.walk():
            for n in d.filenames:
                if n.startswith(TMP_PREFIX):
                    (d.here / n).unlink()
                    gone += 1
    return gone


def abort(volume: Path) -> int:
    """Forget an interrupted pass: its journal and any copy it left.  Returns what was removed."""
    gone = _remove_stale_copies(volume)
    journal = volume / JOURNAL
    if journal.exists():
        journal.unlink()
        gone += 1
    durable.fsync_dir(volume)
    return gone


def _done_so_far(journal: Path) -> set[str]:
    raw = sidecar.read_bounded(journal, JOURNAL_MAX)
    if raw is None:
        return set()
    done = set()
    for line in raw.decode("utf-8", "surrogateescape").splitlines():
        try:
            done.add(str(json.loads(line)))
        except ValueError:
            continue  # the last line, cut short by a crash: that file is done again
    return done


def reencrypt(volume: Path, keys: VolumeKeys, progress: Callable[[int], None] = lambda n: None) -> ReencryptResult:
    journal_path = volume / JOURNAL
    done = _done_so_far(journal_path)
    _remove_stale_copies(volume)  # copies left by an interrupted run
    groups: dict[tuple[int, int], list[str]] = defaultdict(list)
    result = ReencryptResult()
    for rel, path in lower_entries(volume):
        st = path.lstat()
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            groups[(st.st_dev, st.st_ino)].append(rel)
        else:
            result.special += 1
            progress(1)
    cfg = config.VolumeConfig.load(volume)
    # never through a symlink someone planted: the pass runs as root
    fd = os.open(journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "a", encoding="utf-8", errors="surrogateescape") as journal, Tree(volume) as tree:
        for names_of_inode in groups.values():
            key = names_of_inode[0]
            if key in done:
                result.skipped += len(names_of_inode)
                progress(len(names_of_inode))
                continue
            try:
                with contextlib.ExitStack() as reached:  # each name through its directory's descriptor
                    paths = [reached.enter_context(tree.entry(rel)) for rel in names_of_inode]
                    if paths[0].is_symlink():
                        _symlink(paths[0], keys)
                        result.symlinks += 1
                    else:
                        result.bytes += _file(paths, keys, cfg.bound_xattrs, cfg.holes)
                        result.files += 1
            except (OSError, content.DamagedFile) as e:
                why = getattr(e, "strerror", None) or str(e)
                raise ReencryptError(
                    f"stopped at {key} ({why}); every file is whole: run it again to resume, or `fs reencrypt --abort`"
                ) from None
            journal.write(json.dumps(key) + "\n")
            journal.flush()
            os.fsync(journal.fileno())
            progress(len(names_of_inode))
    journal_path.unlink()
    durable.fsync_dir(volume)
    return result


def _is_hole(chunk: bytes, k: int, index: int, last: int) -> bool:
    """Whether block ``index`` (the chunk's ``k``th) is stored as zeros: a hole (never the last)."""
    s = k * content.CBLOCK
    return index < last and chunk[s] == 0 and chunk[s : s + content.CBLOCK] == content.ZERO_CBLOCK


def copy_content(
    src: int, dst: int, size: int, keys: VolumeKeys, header: content.FileHeader, holes: bool, new_keys: VolumeKeys | None = None
) -> tuple[int, bytes]:
    """Write ``src``'s data under ``header``'s key into ``dst``, holes kept (on volumes that have
    them, format version 3 on); (bytes, the old file id).  ``new_keys``: the header is written
    under those (a full rotation), not under ``keys``."""
    old = content.FileCipher(
        content.FileHeader.decode(os.pread(src, content.HEADER, 0), keys.kek, keys.volume_id, keys.kind(FILE))
    )
    new = content.FileCipher(header)
    to = new_keys or keys
    os.pwrite(dst, header.encode(to.kek, to.volume_id), 0)
    last = (size - 1) // content.BLOCK  # never a hole: every block before it may be
    plain = bytearray(PIECE_BLOCKS * content.BLOCK)
    total, index = 0, 0
    while index <= last:
        try:  # the next block holding data (the lower file's own holes are skipped unread)
            data_at = os.lseek(src, content.block_offset(index), os.SEEK_DATA)
        except OSError:
            data_at = content.block_offset(last)
        index = max(index, min(last, (data_at - content.HEADER) // content.CBLOCK))
        n = min(PIECE_BLOCKS, last + 1 - index)
        chunk = os.pread(src, n * content.CBLOCK, content.block_offset(index))
        got = old.open_into(index, memoryview(chunk), memoryview(plain), hole_limit=last if holes else 0)
        k = 0
        while k < n:  # runs of blocks with data; blocks stored as zeros stay holes
            if holes and _is_hole(chunk, k, index + k, last):
                k += 1
                continue
            run = k + 1
            while run < n and not (holes and _is_hole(chunk, run, index + run, last)):
                run += 1
            piece = memoryview(plain)[k * content.BLOCK : min(run * content.BLOCK, got)]
            os.pwrite(dst, new.seal(index + k, piece), content.block_offset(index + k))
            total += len(piece)
            k = run
        index += n
    os.ftruncate(dst, content.lower_size(size))
    return total, old.file_id


def finish_copy(fd: int, st: os.stat_result) -> None:
    """A copy given its original's owner, mode and times (last: writing would change them),
    durable before it is renamed over anything."""
    os.fchown(fd, st.st_uid, st.st_gid)
    os.fchmod(fd, st.st_mode & 0o7777)
    os.fsync(fd)
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))


def _file(paths: list[Path], keys: VolumeKeys, bound_xattrs: bool, holes: bool) -> int:
    first = paths[0]
    src = sidecar.open_regular(first, os.O_RDONLY)
    try:
        st = os.fstat(src)
        tmp = _tmp_name(first.parent)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            total, rebind = 0, None
            if st.st_size:
                header = content.FileHeader.fresh(keys.kind(FILE))
                total, old_id = copy_content(src, fd, content.plain_size(st.st_size), keys, header, holes)
                if bound_xattrs:  # attribute values follow the file to its new id
                    rebind = (xattrs.file_binding(old_id), xattrs.file_binding(header.file_id))
            cipher = xattrs.XattrCipher(keys.xattr_names, keys.xattr_values, keys.salted)
            for attr in os.listxattr(src):
                value = os.getxattr(src, attr)
                if rebind is not None and attr.startswith(xattrs.PREFIX):
                    try:
                        value = cipher.seal_value(attr, cipher.open_value(attr, value, rebind[0]), rebind[1])
                    except keys_mod.WrongKey:
                        pass  # damaged before: copied as it is, still damaged (fsck names it)
                os.setxattr(fd, attr, value)
            finish_copy(fd, st)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)  # no copy left behind
            raise
        os.close(fd)
    finally:
        os.close(src)
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
    old = content.FileCipher(content.FileHeader.decode(sealed[: content.HEADER], keys.kek, keys.volume_id, keys.kind(SYMLINK)))
    target = old.open(0, sealed[content.HEADER :])
    header = content.FileHeader.fresh(keys.kind(SYMLINK))
    new = header.encode(keys.kek, keys.volume_id) + content.FileCipher(header).seal(0, target)
    tmp = _tmp_name(path.parent)
    os.symlink(base64.urlsafe_b64encode(new).rstrip(b"=").decode(), tmp)
    os.replace(tmp, path)
    durable.fsync_dir(path.parent)
