"""A ctypes binding to libfuse3's low-level (inode-based) API, as far as the mount needs it:
the structures of libfuse 3.14's headers (fuse_lowlevel.h, fuse_common.h), the session calls
and the reply calls.  Nothing of Strongroom's here: lowlevel.py builds the file system on it.

libfuse's own structures with a platform-dependent layout (struct stat, struct statvfs) are taken
from mfusepy, which defines them per architecture."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")  # mfusepy would take libfuse2's layouts otherwise
import mfusepy  # noqa: E402

c_stat = mfusepy.c_stat
c_statvfs = mfusepy.c_statvfs
fuse_file_info = mfusepy.fuse_file_info  # libfuse 3's layout (flags, bit fields, fh, lock_owner, ...)

fuse_req_t = ctypes.c_void_p
fuse_ino_t = ctypes.c_uint64
off_t = ctypes.c_int64

FUSE_CAP_READDIRPLUS = 1 << 13
FUSE_CAP_READDIRPLUS_AUTO = 1 << 14
FUSE_CAP_WRITEBACK_CACHE = 1 << 16

FUSE_SET_ATTR_MODE = 1 << 0
FUSE_SET_ATTR_UID = 1 << 1
FUSE_SET_ATTR_GID = 1 << 2
FUSE_SET_ATTR_SIZE = 1 << 3
FUSE_SET_ATTR_ATIME = 1 << 4
FUSE_SET_ATTR_MTIME = 1 << 5
FUSE_SET_ATTR_ATIME_NOW = 1 << 7
FUSE_SET_ATTR_MTIME_NOW = 1 << 8


class fuse_entry_param(ctypes.Structure):  # noqa: N801 - libfuse's name
    _fields_ = [
        ("ino", fuse_ino_t),
        ("generation", ctypes.c_uint64),
        ("attr", c_stat),
        ("attr_timeout", ctypes.c_double),
        ("entry_timeout", ctypes.c_double),
    ]


class fuse_ctx(ctypes.Structure):  # noqa: N801
    _fields_ = [("uid", ctypes.c_uint32), ("gid", ctypes.c_uint32), ("pid", ctypes.c_int32), ("umask", ctypes.c_uint32)]


class fuse_conn_info(ctypes.Structure):  # noqa: N801
    _fields_ = [
        (name, ctypes.c_uint)
        for name in (
            "proto_major",
            "proto_minor",
            "max_write",
            "max_read",
            "max_readahead",
            "capable",
            "want",
            "max_background",
            "congestion_threshold",
            "time_gran",
        )
    ] + [("reserved", ctypes.c_uint * 22)]


class fuse_forget_data(ctypes.Structure):  # noqa: N801
    _fields_ = [("ino", fuse_ino_t), ("nlookup", ctypes.c_uint64)]


class fuse_args(ctypes.Structure):  # noqa: N801
    _fields_ = [("argc", ctypes.c_int), ("argv", ctypes.POINTER(ctypes.c_char_p)), ("allocated", ctypes.c_int)]


_fi = ctypes.POINTER(fuse_file_info)
_cstr = ctypes.c_char_p
_void = None

# The callbacks, in struct fuse_lowlevel_ops order (libfuse 3.14).  Those left unset stay NULL:
# libfuse answers ENOSYS for them.
OPS = [
    ("init", ctypes.CFUNCTYPE(_void, ctypes.c_void_p, ctypes.POINTER(fuse_conn_info))),
    ("destroy", ctypes.CFUNCTYPE(_void, ctypes.c_void_p)),
    ("lookup", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _cstr)),
    ("forget", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, ctypes.c_uint64)),
    ("getattr", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _fi)),
    ("setattr", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, ctypes.POINTER(c_stat), ctypes.c_int, _fi)),
    ("readlink", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t)),
    ("mknod", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _cstr, ctypes.c_uint32, ctypes.c_uint64)),
    ("mkdir", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _cstr, ctypes.c_uint32)),
    ("unlink", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _cstr)),
    ("rmdir", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _cstr)),
    ("symlink", ctypes.CFUNCTYPE(_void, fuse_req_t, _cstr, fuse_ino_t, _cstr)),
    ("rename", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _cstr, fuse_ino_t, _cstr, ctypes.c_uint)),
    ("link", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, fuse_ino_t, _cstr)),
    ("open", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _fi)),
    ("read", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, ctypes.c_size_t, off_t, _fi)),
    ("write", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, ctypes.c_void_p, ctypes.c_size_t, off_t, _fi)),
    ("flush", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _fi)),
    ("release", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _fi)),
    ("fsync", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, ctypes.c_int, _fi)),
    ("opendir", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _fi)),
    ("readdir", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, ctypes.c_size_t, off_t, _fi)),
    ("releasedir", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _fi)),
    ("fsyncdir", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, ctypes.c_int, _fi)),
    ("statfs", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t)),
    ("setxattr", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _cstr, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)),
    ("getxattr", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _cstr, ctypes.c_size_t)),
    ("listxattr", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, ctypes.c_size_t)),
    ("removexattr", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _cstr)),
    ("access", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, ctypes.c_int)),
    ("create", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, _cstr, ctypes.c_uint32, _fi)),
    ("getlk", ctypes.c_void_p),
    ("setlk", ctypes.c_void_p),
    ("bmap", ctypes.c_void_p),
    ("ioctl", ctypes.c_void_p),
    ("poll", ctypes.c_void_p),
    ("write_buf", ctypes.c_void_p),
    ("retrieve_reply", ctypes.c_void_p),
    ("forget_multi", ctypes.CFUNCTYPE(_void, fuse_req_t, ctypes.c_size_t, ctypes.POINTER(fuse_forget_data))),
    ("flock", ctypes.c_void_p),
    ("fallocate", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, ctypes.c_int, off_t, off_t, _fi)),
    ("readdirplus", ctypes.CFUNCTYPE(_void, fuse_req_t, fuse_ino_t, ctypes.c_size_t, off_t, _fi)),
    ("copy_file_range", ctypes.c_void_p),
    ("lseek", ctypes.c_void_p),
]


class fuse_lowlevel_ops(ctypes.Structure):  # noqa: N801
    _fields_ = OPS


def _load() -> ctypes.CDLL:
    name = ctypes.util.find_library("fuse3") or "libfuse3.so.3"
    if os.environ.get("SR_PYDLL"):
        return ctypes.PyDLL(name, use_errno=True)
    return ctypes.CDLL(name, use_errno=True)


lib = _load()
# Reply calls write to /dev/fuse: through CDLL they release the GIL while they do.
_P = ctypes.c_void_p
for _name, _res, _args in [
    ("fuse_session_new", _P, [ctypes.POINTER(fuse_args), ctypes.POINTER(fuse_lowlevel_ops), ctypes.c_size_t, _P]),
    ("fuse_session_mount", ctypes.c_int, [_P, ctypes.c_char_p]),
    ("fuse_session_unmount", None, [_P]),
    ("fuse_session_destroy", None, [_P]),
    ("fuse_session_loop", ctypes.c_int, [_P]),
    ("fuse_session_exit", None, [_P]),
    ("fuse_set_signal_handlers", ctypes.c_int, [_P]),
    ("fuse_remove_signal_handlers", None, [_P]),
    ("fuse_reply_err", ctypes.c_int, [_P, ctypes.c_int]),
    ("fuse_reply_none", None, [_P]),
    ("fuse_reply_entry", ctypes.c_int, [_P, ctypes.POINTER(fuse_entry_param)]),
    ("fuse_reply_create", ctypes.c_int, [_P, ctypes.POINTER(fuse_entry_param), _fi]),
    ("fuse_reply_attr", ctypes.c_int, [_P, ctypes.POINTER(c_stat), ctypes.c_double]),
    ("fuse_reply_readlink", ctypes.c_int, [_P, ctypes.c_char_p]),
    ("fuse_reply_open", ctypes.c_int, [_P, _fi]),
    ("fuse_reply_write", ctypes.c_int, [_P, ctypes.c_size_t]),
    ("fuse_reply_buf", ctypes.c_int, [_P, _P, ctypes.c_size_t]),
    ("fuse_reply_statfs", ctypes.c_int, [_P, ctypes.POINTER(c_statvfs)]),
    ("fuse_reply_xattr", ctypes.c_int, [_P, ctypes.c_size_t]),
    ("fuse_add_direntry", ctypes.c_size_t, [_P, _P, ctypes.c_size_t, ctypes.c_char_p, ctypes.POINTER(c_stat), off_t]),
    (
        "fuse_add_direntry_plus",
        ctypes.c_size_t,
        [_P, _P, ctypes.c_size_t, ctypes.c_char_p, ctypes.POINTER(fuse_entry_param), off_t],
    ),
]:
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args

# fuse_req_ctx only reads a field of the request: called without releasing the GIL.
req_ctx = ctypes.PyDLL(lib._name).fuse_req_ctx
req_ctx.restype = ctypes.POINTER(fuse_ctx)
req_ctx.argtypes = [_P]


def make_args(argv: list[str]) -> tuple[fuse_args, object]:
    """A struct fuse_args for ``argv`` (and the object keeping its strings alive)."""
    raw = [os.fsencode(a) for a in argv]
    arr = (ctypes.c_char_p * (len(raw) + 1))(*raw, None)
    return fuse_args(len(raw), arr, 0), (raw, arr)
