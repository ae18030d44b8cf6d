"""POSIX ACLs in their extended-attribute form (linux/posix_acl_xattr.h), and the three duties the
kernel leaves to a FUSE file system that takes them (FUSE_POSIX_ACL): keep the mode in step with
an access ACL when one is set, keep an access ACL in step with the mode on chmod, and give a new
entry the ACL its directory's default ACL says (posix_acl_create in the kernel's own file
systems).  The kernel enforces them; the daemon stores them encrypted like any other attribute.

The form: a little-endian u32 version (2), then one (u16 tag, u16 perm, u32 id) per entry.
"""

from __future__ import annotations

import errno
import os
import struct

ACCESS = "system.posix_acl_access"
DEFAULT = "system.posix_acl_default"
NAMES = (ACCESS, DEFAULT)
VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
UNDEFINED_ID = 0xFFFFFFFF
_HEADER = struct.Struct("<I")
_ENTRY = struct.Struct("<HHI")
MAX_ENTRIES = 1024

Entry = tuple[int, int, int]  # (tag, perm, id)
Entries = list[Entry]


def _invalid() -> OSError:
    return OSError(errno.EINVAL, os.strerror(errno.EINVAL))


def parse(value: bytes) -> list[Entry]:
    """The entries of an ACL in xattr form; EINVAL for anything malformed."""
    if len(value) < _HEADER.size or (len(value) - _HEADER.size) % _ENTRY.size:
        raise _invalid()
    if _HEADER.unpack_from(value)[0] != VERSION:
        raise _invalid()
    n = (len(value) - _HEADER.size) // _ENTRY.size
    if n > MAX_ENTRIES:
        raise _invalid()
    entries = [_ENTRY.unpack_from(value, _HEADER.size + i * _ENTRY.size) for i in range(n)]
    tags = [t for t, _, _ in entries]
    if any(t not in (USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER) or p & ~7 for t, p, _ in entries):
        raise _invalid()
    if entries and (tags.count(USER_OBJ) != 1 or tags.count(GROUP_OBJ) != 1 or tags.count(OTHER) != 1):
        raise _invalid()
    if (USER in tags or GROUP in tags) and MASK not in tags:
        raise _invalid()
    return entries


def serialize(entries: list[Entry]) -> bytes:
    order = {USER_OBJ: 0, USER: 1, GROUP_OBJ: 2, GROUP: 3, MASK: 4, OTHER: 5}
    ordered = sorted(entries, key=lambda e: (order[e[0]], e[2]))
    return _HEADER.pack(VERSION) + b"".join(_ENTRY.pack(*e) for e in ordered)


def is_minimal(entries: list[Entry]) -> bool:
    """Whether the ACL says no more than a mode does (owner, group, other)."""
    return all(t in (USER_OBJ, GROUP_OBJ, OTHER) for t, _, _ in entries)


def _perm(entries: list[Entry], tag: int) -> int:
    return next((p for t, p, _ in entries if t == tag), 0)


def mode_of(entries: list[Entry]) -> int:
    """The permission bits an access ACL implies: the group class is the mask, if there is one."""
    group = _perm(entries, MASK) if any(t == MASK for t, _, _ in entries) else _perm(entries, GROUP_OBJ)
    return _perm(entries, USER_OBJ) << 6 | group << 3 | _perm(entries, OTHER)


def with_mode(entries: list[Entry], mode: int) -> list[Entry]:
    """The access ACL after a chmod to ``mode`` (the group class bits go to the mask, if any)."""
    has_mask = any(t == MASK for t, _, _ in entries)
    bits = {USER_OBJ: mode >> 6 & 7, MASK if has_mask else GROUP_OBJ: mode >> 3 & 7, OTHER: mode & 7}
    return [(t, bits.get(t, p), i) for t, p, i in entries]


def inherit(default: list[Entry], mode: int) -> tuple[list[Entry], int]:
    """A new entry's access ACL and mode from its directory's default ACL and the mode asked for
    (the umask is not applied: the default ACL takes its place)."""
    has_mask = any(t == MASK for t, _, _ in default)
    keep = {USER_OBJ: mode >> 6 & 7, MASK if has_mask else GROUP_OBJ: mode >> 3 & 7, OTHER: mode & 7}
    access = [(t, p & keep.get(t, 7), i) for t, p, i in default]
    return access, (mode & ~0o777) | mode_of(access)
