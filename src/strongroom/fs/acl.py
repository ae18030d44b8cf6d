"""Process-based access control on a mounted volume: only listed programs see plaintext.

Rules live in the volume (`strongroom.acl.json`) with an HMAC-SHA256 under the volume's rules
MAC key (FORMAT.md §2), so changing them needs the volume key and an edit on disk without it is
detected: the daemon then refuses everything until the rules verify again.  The volume config
records, under its own MAC, that the volume has rules and their lowest serial: deleting the
rules file or putting back an older one is refused the same way.

A caller (the FUSE request's pid) is resolved to its executable (/proc/PID/exe), uid and, when
a rule asks, its command line and ancestors.  The executable's SHA-256 is cached by device,
inode, size, mtime and ctime, so a replaced binary is hashed again; verdicts are never cached by
pid alone (a process's identity is its pid *and* its start time).
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from strongroom.fs import acl_floor, config, durable, procid, sidecar
from strongroom.fs.names import b64u
from strongroom.fs.ratelog import RateLimitedLog

RULES_FILE = "strongroom.acl.json"
RULES_MAX = 4 << 20  # bytes: thousands of rules
MODES = ("enforcing", "permissive", "off")
MAC_AD = b"strongroom/v1/acl\x00"
RELOAD_CHECK_S = 0.5

log = logging.getLogger("strongroom.acl")


def _no_note(kind: str, where: str) -> None:
    return None


class AclError(Exception):
    """The rules file is tampered with, corrupt, or a rule is invalid."""


@dataclass
class Rule:
    id: str
    program: str  # absolute path of the executable
    sha256: str
    path: str = "**"  # glob relative to the volume root
    mode: str = "rw"  # r or rw
    uid: int | None = None
    args_prefix: list[str] = field(default_factory=list)  # argv[1:] must start with these
    # Programs let in when descended from `program`, each pinned like it: path -> SHA-256.
    pinned_children: dict[str, str] = field(default_factory=dict)
    # Children named by path alone, as older Strongroom wrote them: never matched (a path is no
    # identity), kept so the rules' MAC still verifies; `acl update-fingerprints` pins them.
    children: list[str] = field(default_factory=list)

    def canonical(self) -> dict[str, Any]:
        """The rule as its MAC covers it: a field added later is left out while empty, so rules
        written before it keep verifying."""
        out = asdict(self)
        if not out["pinned_children"]:
            del out["pinned_children"]
        return out

    def covers(self, rel_path: str, write: bool = False) -> bool:
        """Whether the rule reaches ``rel_path``; the directories above its scope may be looked up
        and listed (to get there), never written."""
        if self.path in ("**", "*", ""):
            return True
        base = self.path.rstrip("*").rstrip("/")
        if fnmatch.fnmatchcase(rel_path, self.path) or rel_path == base or rel_path.startswith(base + "/"):
            return True
        return not write and (rel_path in ("", ".") or base.startswith(rel_path + "/"))


@dataclass
class RuleSet:
    mode: str = "enforcing"
    rules: list[Rule] = field(default_factory=list)
    serial: int = 0  # bumped on every change

    def canonical(self) -> bytes:
        return json.dumps(
            {"mode": self.mode, "rules": [r.canonical() for r in self.rules], "serial": self.serial},
            sort_keys=True,
            separators=(",", ":"),
        ).encode()

    def mac(self, key: bytes) -> str:
        return b64u(hmac.new(key, MAC_AD + self.canonical(), hashlib.sha256).digest())


def load_rules(volume: Path, key: bytes) -> RuleSet | None:
    """The volume's rules, verified; None when it has none; AclError when they do not verify."""
    path = volume / RULES_FILE
    try:
        data = sidecar.read_bounded(path, RULES_MAX)
        if data is None:
            return None
        raw = json.loads(data)
    except sidecar.UnsafeFile as e:
        raise AclError(f"{RULES_FILE} {e.why}") from None
    except (OSError, ValueError) as e:
        raise AclError(f"{RULES_FILE} is unreadable ({type(e).__name__})") from None
    try:
        rs = RuleSet(raw["mode"], [Rule(**r) for r in raw["rules"]], int(raw["serial"]))
        mac = raw["mac"]
    except (KeyError, TypeError, ValueError) as e:
        raise AclError(f"{RULES_FILE} is corrupt ({type(e).__name__})") from None
    if not hmac.compare_digest(rs.mac(key), str(mac)):
        raise AclError(f"{RULES_FILE} was changed without the volume key (its MAC does not verify)")
    if rs.mode not in MODES:
        raise AclError(f"unknown ACL mode {rs.mode!r}")
    return rs


def save_rules(volume: Path, key: bytes, rs: RuleSet) -> None:
    """Write the rules with the next serial, then record in the volume config (under its MAC)
    that the volume has rules at that serial or later: from then on a missing or older rules file
    is refused.  The rules go first, so a crash between leaves a floor the file still meets."""
    cfg = config.VolumeConfig.load(volume)
    try:
        floor = cfg.verified_acl_floor(key)
    except config.ConfigError as e:
        raise AclError(str(e)) from None
    # past what this host has seen too: writing rules again is how an operator moves on from a
    # rollback the host refused
    rs.serial = max(rs.serial, floor or 0, acl_floor.seen(cfg.volume_id) or 0) + 1
    body = json.loads(rs.canonical())
    body["mac"] = rs.mac(key)
    durable.replace_file(volume / RULES_FILE, (json.dumps(body, indent=2) + "\n").encode())
    cfg.raise_acl_floor(rs.serial, key)
    cfg.save(volume)
    acl_floor.remember(cfg.volume_id, rs.serial)


def required_serial(volume: Path, key: bytes) -> int | None:
    """The serial the volume's rules must have at least (None: it never had rules): the config's
    record, and AclError if this host has seen newer rules than that (the config and the rules
    were put back together as an earlier pair: acl_floor.py)."""
    try:
        cfg = config.VolumeConfig.load(volume)
        floor = cfg.verified_acl_floor(key)
    except config.ConfigError as e:
        raise AclError(str(e)) from None
    host = acl_floor.seen(cfg.volume_id)
    if host is not None and host > (floor or 0):
        said = f"serial {floor}" if floor is not None else "no rules"
        raise AclError(
            f"this host has enforced or written this volume's rules at serial {host}, but its config records {said}: "
            "the config and the rules were put back to an earlier state (write the rules again to move on)"
        )
    return floor


def check_rules(rs: RuleSet | None, floor: int | None) -> RuleSet | None:
    """``rs`` if it may be used on a volume whose rules are at ``floor`` or later; AclError for
    a volume with rules whose file is gone or older (a rollback)."""
    if floor is None:
        return rs
    if rs is None:
        raise AclError(f"{RULES_FILE} is missing, but this volume has access rules (serial {floor} or later)")
    if rs.serial < floor:
        raise AclError(
            f"{RULES_FILE} is older than this volume's rules (serial {rs.serial}, need {floor} or later): "
            "an earlier copy was put back"
        )
    return rs


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class Caller:
    pid: int
    uid: int
    exe: str
    sha256: str
    argv: tuple[str, ...]
    ancestors: tuple[tuple[str, str], ...]  # (exe, sha256) of the parent, grandparent, ...


class Enforcer:
    """Decides whether a calling process may reach a path, and reloads the rules when they change."""

    def __init__(
        self, volume: Path, key: bytes, learn_log: Path | None = None, reporter: Any = None, floor: int | None = None
    ) -> None:
        self.volume = volume
        # the lowest serial accepted: the config's record, raised to every serial seen since
        self.floor = floor
        self.reporter = reporter  # an acl_report.DenialReporter for volumes keyed by the server
        self.volume_id = config.VolumeConfig.load(volume).volume_id
        self._key = key
        self._lock = threading.Lock()
        self._hashes: dict[tuple[int, int, int, int, int], str] = {}
        self._tracker = procid.Tracker()
        self._callers: dict[tuple[int, ...], Caller] = {}
        self._verdicts: dict[tuple[Any, ...], tuple[bool, Caller | None]] = {}
        self._logged: set[tuple[str, str]] = set()
        self._stamp: tuple[int, int, int] | None = None
        self._checked = 0.0
        self.learn_log = learn_log
        self._ratelog = RateLimitedLog(log)
        # (kind, where): what it met that it did not expect, for `fs status` (health.py)
        self.note: Callable[[str, str], None] = _no_note
        # Pids from FUSE are the mount's pid namespace's; /proc must be that namespace's too, or
        # a pid would be looked up as some other process (fail closed: see _unidentified).
        self.proc_is_ours = procid.proc_is_ours()
        self.broken: str | None = None
        self.rules: RuleSet | None = None
        self._enforcing = False
        self._reload(force=True)

    # -- rules ---------------------------------------------------------------------------
    def _reload(self, force: bool = False) -> None:
        """Look at the rules file now (``active`` decides when); read it again if it changed,
        or always with ``force``."""
        self._checked = time.monotonic()
        try:
            st = (self.volume / RULES_FILE).stat()
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp and not force:
            return
        self._stamp = stamp
        try:
            self.rules = check_rules(load_rules(self.volume, self._key), self.floor)
            if self.rules is not None:
                acl_floor.remember(self.volume_id, self.rules.serial)  # read again only when the file changes
                self.floor = self.rules.serial
            if self.broken is not None:
                log.warning("access rules verify again (serial %s)", self.floor)
            self.broken = None
            for r in [] if self.rules is None else self.rules.rules:
                if r.children:
                    log.warning(
                        "rule %s names children by path alone (%s); they are refused until "
                        "`strongroom acl update-fingerprints` pins them by hash",
                        r.id,
                        ", ".join(r.children),
                    )
        except AclError as e:
            self.rules = None
            self.broken = str(e)
            self.note("access rules refused", str(self.volume / RULES_FILE))
            log.error("access rules refused: %s; every request is denied until they verify", e)
        self._enforcing = self.broken is not None or (self.rules is not None and self.rules.mode != "off")

    @property
    def active(self) -> bool:
        # Asked on every request of the mount: the common answer costs this one call.
        if time.monotonic() - self._checked >= RELOAD_CHECK_S:
            self._reload()
        return self._enforcing

    # -- callers -------------------------------------------------------------------------
    def _hash(self, exe_fd_path: str) -> str:
        st = os.stat(exe_fd_path)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        digest = self._hashes.get(key)
        if digest is None:
            digest = sha256_file(exe_fd_path)
            with self._lock:
                if len(self._hashes) > 4096:
                    self._hashes.clear()
                self._hashes[key] = digest
        return digest

    def identity(self, pid: int) -> tuple[int, ...] | None:
        """pid, start time, the running image's identity and the uid: an exec or a setuid changes it."""
        return self._tracker.identity(pid)

    def caller(self, pid: int, key: tuple[int, ...] | None = None) -> Caller | None:
        key = key or self.identity(pid)
        if key is None:
            return None
        uid, ppid = key[7], key[8]
        cached = self._callers.get(key)
        if cached is not None:
            return cached
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
            digest = self._hash(f"/proc/{pid}/exe")  # the running image, even if the path was replaced
            argv = tuple(a.decode(errors="surrogateescape") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1])
        except (OSError, ValueError, IndexError):
            return None
        ancestors = []
        p = ppid
        for _ in range(32):
            if p <= 1:
                break
            try:
                ancestors.append((os.readlink(f"/proc/{p}/exe"), self._hash(f"/proc/{p}/exe")))
                p = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                break
        c = Caller(pid, uid, exe, digest, argv, tuple(ancestors))
        with self._lock:
            if len(self._callers) > 4096:
                self._callers.clear()
            self._callers[key] = c
        return c

    # -- verdicts ------------------------------------------------------------------------
    def allowed(self, pid: int, rel_path: str, write: bool) -> bool:
        """May process ``pid`` reach ``rel_path`` (read, or write too)?  Logs denials."""
        if not self.active:
            return True
        if pid <= 0 or not self.proc_is_ours:
            return self._unidentified(pid)
        if self.broken is not None:
            self._ratelog(logging.WARNING, "broken", "denied pid %d: access rules do not verify", pid)
            if self.reporter is not None:  # the audit says why, once per program and directory
                c = self.caller(pid)
                if c is not None:
                    self.reporter.add(c.exe, c.sha256, c.uid, os.path.dirname(rel_path) or ".", write, True, self.broken)
            return False
        assert self.rules is not None
        ident = self.identity(pid)
        if ident is None:
            return False
        vkey = (ident, self.rules.serial, rel_path, write)
        cached = self._verdicts.get(vkey)
        if cached is not None:
            verdict, denied_caller = cached
            if denied_caller is not None:
                self._report(denied_caller, rel_path, write)  # every denial is reported, cached or not
            return verdict
        c = self.caller(pid, ident)
        if c is None:
            return False
        matched = any(self._matches(r, c, rel_path, write) for r in self.rules.rules)
        verdict = matched
        if not matched:
            self._denied(c, rel_path, write)
            self._report(c, rel_path, write)
            verdict = self.rules.mode == "permissive"
        with self._lock:
            if len(self._verdicts) > 65536:
                self._verdicts.clear()
            # keyed by the process's identity and the rules' serial, never pid alone
            self._verdicts[vkey] = (verdict, None if matched else c)
        return verdict

    def _unidentified(self, pid: int) -> bool:
        """A caller the daemon cannot identify: denied (allowed in permissive mode), never let
        through unchecked.  FUSE reports pid 0 for a process outside the pid namespace the mount
        was made in (a daemon in a container, serving the host through a shared mount); and a
        /proc of another pid namespace would name another process by that pid."""
        if not self.proc_is_ours:
            why = "/proc is not this pid namespace's (mount a proc of the daemon's own namespace)"
        else:
            why = "the caller is outside the daemon's pid namespace (FUSE reports pid 0)"
        permissive = self.broken is None and self.rules is not None and self.rules.mode == "permissive"
        verb = "would deny" if permissive else "denied"
        self._ratelog(logging.WARNING, ("unidentified", why), "%s a request whose caller cannot be identified: %s", verb, why)
        self.note("caller not identified", f"pid {pid}")
        return permissive

    def _report(self, c: Caller, rel_path: str, write: bool) -> None:
        if self.reporter is not None and self.rules is not None:
            self.reporter.add(c.exe, c.sha256, c.uid, os.path.dirname(rel_path) or ".", write, self.rules.mode == "enforcing")

    @staticmethod
    def _matches(r: Rule, c: Caller, rel_path: str, write: bool) -> bool:
        if write and r.mode != "rw":
            return False
        if r.uid is not None and r.uid != c.uid:
            return False
        if not r.covers(rel_path, write):
            return False
        if c.exe == r.program and c.sha256 == r.sha256:
            return list(c.argv[1 : 1 + len(r.args_prefix)]) == r.args_prefix
        pinned = r.pinned_children
        if pinned and pinned.get(c.exe) == c.sha256:
            # a listed child, by path and hash: so must be every process between it and the program
            for exe, digest in c.ancestors:
                if exe == r.program and digest == r.sha256:
                    return True
                if pinned.get(exe) != digest:
                    return False
        return False

    def _denied(self, c: Caller, rel_path: str, write: bool) -> None:
        path_class = os.path.dirname(rel_path) or "."
        key = (c.exe + "\0" + c.sha256, path_class)
        if key in self._logged:
            return
        if len(self._logged) > 10_000:
            self._logged.clear()
        self._logged.add(key)
        assert self.rules is not None
        verb = "would deny" if self.rules.mode == "permissive" else "denied"
        log.warning(
            "%s: %s (uid %d, sha256 %s) %s %s/", verb, c.exe, c.uid, c.sha256[:16], "write" if write else "read", path_class
        )
        if self.learn_log is not None:
            entry = {
                "exe": c.exe,
                "sha256": c.sha256,
                "uid": c.uid,
                "argv": list(c.argv),
                "path_class": path_class,
                "write": write,
                "at": time.time(),
            }
            try:
                fd = os.open(self.learn_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                try:
                    os.write(fd, (json.dumps(entry) + "\n").encode())
                finally:
                    os.close(fd)
            except OSError:
                pass


def learn_log_path(volume_id: bytes) -> Path:
    """Where a mount records what its access rules denied (or would have): root-only, off the disk."""
    return Path("/run/strongroom") / f"acl-{b64u(volume_id)}.jsonl"


def propose(entries: list[dict[str, Any]]) -> list[Rule]:
    """Rules that would have allowed the logged denials: one per program and path class."""
    out: dict[tuple[str, str, str], Rule] = {}
    for e in entries:
        path = "**" if e["path_class"] == "." else e["path_class"] + "/**"
        key = (e["exe"], e["sha256"], path)
        r = out.get(key)
        if r is None:
            out[key] = Rule(id="", program=e["exe"], sha256=e["sha256"], path=path, mode="rw" if e["write"] else "r")
        elif e["write"]:
            r.mode = "rw"
    return list(out.values())
