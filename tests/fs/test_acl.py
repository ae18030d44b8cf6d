"""Process-based access control through a real mount, with real programs: allowed and refused
binaries, copies with the same hash, interpreters and their scripts, children, tampered rules,
permissive mode and learn."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strongroom.fs import acl, config
from tests.fs.mounts import Mount
from tests.serverproc import cli

CAT, HEAD, BASH = "/usr/bin/cat", "/usr/bin/head", "/usr/bin/bash"
PYTHON = os.path.realpath(sys.executable)


@pytest.fixture
def vol(tmp_path: Path) -> Iterator[Mount]:
    m = Mount(tmp_path).init().start()
    (m.mnt / "db").mkdir()
    (m.mnt / "db" / "data").write_text("secret rows\n")
    (m.mnt / "app.log").write_text("log line\n")
    m.stop()
    yield m
    m.stop()


def _acl(m: Mount, *args: str) -> subprocess.CompletedProcess[bytes]:
    r = cli("acl", *args, "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0, r.stderr
    return r


def _run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, cwd=cwd, timeout=30)


def _refused(r: subprocess.CompletedProcess[str]) -> bool:
    return r.returncode != 0 and "Permission denied" in (r.stderr + r.stdout)


def test_only_the_listed_binary_at_its_path_reads(vol: Mount, tmp_path: Path) -> None:
    _acl(vol, "add", str(vol.lower), "--allow", CAT, "--mode", "r")
    vol.start()
    data = vol.mnt / "db" / "data"
    r = _run(CAT, str(data))
    assert r.returncode == 0 and r.stdout == "secret rows\n"
    assert _refused(_run(HEAD, str(data)))  # a different binary, right after an allowed read
    copy = tmp_path / "cat-copy"
    shutil.copy2(CAT, copy)  # the same bytes, the same hash, another path
    assert _refused(_run(str(copy), str(data)))
    assert _refused(_run(BASH, "-c", f"echo x > {vol.mnt}/db/new"))  # and no one else writes
    r = _run(BASH, "-c", f"cat {data} > /dev/null; true")  # cat, but started by bash: still cat
    assert r.returncode == 0


def test_write_mode_uid_and_paths(vol: Mount) -> None:
    _acl(vol, "add", str(vol.lower), "--allow", BASH, "--path", "db/**", "--mode", "rw")
    vol.start()
    assert _run(BASH, "-c", f"echo more >> {vol.mnt}/db/data").returncode == 0
    assert _refused(_run(BASH, "-c", f"cat < {vol.mnt}/app.log"))  # outside db/**
    r = _run(BASH, "-c", f"read line < {vol.mnt}/db/data; echo $line")
    assert r.returncode == 0 and r.stdout.strip() == "secret rows"
    vol.stop()
    _acl(vol, "rm", str(vol.lower), "r1")
    _acl(vol, "add", str(vol.lower), "--allow", BASH, "--uid", "12345")  # the same program, another user
    vol.start()
    assert _refused(_run(BASH, "-c", f"cat < {vol.mnt}/db/data"))  # the tests run as root (uid 0)


def test_interpreter_needs_the_listed_script(vol: Mount, tmp_path: Path) -> None:
    good, bad = tmp_path / "allowed.py", tmp_path / "other.py"
    code = f"print(open({str(vol.mnt / 'db' / 'data')!r}).read(), end='')\n"
    good.write_text(code)
    bad.write_text(code)
    _acl(vol, "add", str(vol.lower), "--allow", PYTHON, "--args-prefix", str(good), "--mode", "r")
    vol.start()
    r = _run(PYTHON, str(good))
    assert r.returncode == 0 and r.stdout == "secret rows\n", r.stderr
    r = _run(PYTHON, str(bad))
    assert r.returncode != 0 and "PermissionError" in r.stderr


def test_children_only_with_children(vol: Mount) -> None:
    script = f"cat {vol.mnt}/db/data; true"  # "; true" keeps bash from exec'ing cat
    _acl(vol, "add", str(vol.lower), "--allow", BASH, "--mode", "r")
    vol.start()
    r = _run(BASH, "-c", script)
    assert "Permission denied" in r.stderr and r.stdout == ""  # bash may, cat (its child) may not
    vol.stop()
    _acl(vol, "add", str(vol.lower), "--allow", BASH, "--mode", "r", "--children", CAT)
    vol.start()
    r = _run(BASH, "-c", script)
    assert r.returncode == 0 and r.stdout == "secret rows\n", r.stderr
    assert _refused(_run(CAT, str(vol.mnt / "db" / "data")))  # cat on its own is still refused


def test_children_are_pinned_by_path_and_hash(vol: Mount, tmp_path: Path) -> None:
    """A listed child whose bytes changed, or an unlisted process between the child and the
    program, is refused; so are children an older Strongroom named by path alone, until
    update-fingerprints pins them."""
    tool = tmp_path / "tool"
    shutil.copy2(CAT, tool)
    _acl(vol, "add", str(vol.lower), "--allow", BASH, "--mode", "r", "--children", str(tool))
    vol.start()
    script = f"{tool} {vol.mnt}/db/data; true"
    r = _run(BASH, "-c", script)
    assert r.returncode == 0 and r.stdout == "secret rows\n", r.stderr
    shutil.copy2(HEAD, tool)  # same path, other bytes
    assert "Permission denied" in _run(BASH, "-c", script).stderr
    shutil.copy2(CAT, tool)
    assert _run(BASH, "-c", script).returncode == 0
    # bash -> python -> tool: python sits between them unpinned
    via = f"import subprocess; subprocess.run([{str(tool)!r}, {str(vol.mnt / 'db' / 'data')!r}])"
    assert "Permission denied" in _run(BASH, "-c", f"{PYTHON} -c {json.dumps(via)}; true").stderr
    vol.stop()
    # rules as an older Strongroom wrote them: children by path alone, never matched
    key = config.VolumeConfig.load(vol.lower).unlock_passphrase("volume passphrase").rules_mac
    rules = acl.load_rules(vol.lower, key)
    assert rules is not None
    rules.rules = [acl.Rule(id="r1", program=BASH, sha256=acl.sha256_file(BASH), mode="r", children=[CAT])]
    acl.save_rules(vol.lower, key, rules)
    vol.start()
    assert "Permission denied" in _run(BASH, "-c", f"cat {vol.mnt}/db/data; true").stderr
    assert "names children by path alone" in vol.log.read_text()
    r = cli("acl", "update-fingerprints", str(vol.mnt), "--yes", "--json", "--passphrase-file", str(vol.pwfile))
    out = json.loads(r.stdout)
    assert out["applied"] and [c["program"] for c in out["changes"]] == [CAT]
    time.sleep(acl.RELOAD_CHECK_S + 0.2)
    r = _run(BASH, "-c", f"cat {vol.mnt}/db/data; true")
    assert r.returncode == 0 and r.stdout == "secret rows\n", r.stderr


def test_rules_written_before_pinned_children_still_verify(tmp_path: Path) -> None:
    rs = acl.RuleSet(rules=[acl.Rule(id="r1", program=CAT, sha256="0" * 64, children=[HEAD])], serial=3)
    old = json.dumps(  # the canonical form before pinned_children existed
        {
            "mode": "enforcing",
            "rules": [
                {
                    "id": "r1",
                    "program": CAT,
                    "sha256": "0" * 64,
                    "path": "**",
                    "mode": "rw",
                    "uid": None,
                    "args_prefix": [],
                    "children": [HEAD],
                }
            ],
            "serial": 3,
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    assert rs.canonical() == old


def test_tampered_rules_refuse_the_mount_and_everything_while_mounted(vol: Mount) -> None:
    _acl(vol, "add", str(vol.lower), "--allow", CAT, "--mode", "r")
    rules = vol.lower / acl.RULES_FILE
    saved = rules.read_text()
    vol.start()
    assert _run(CAT, str(vol.mnt / "db" / "data")).returncode == 0
    tampered = json.loads(saved)
    tampered["rules"][0]["program"] = HEAD  # allow another program, without the key
    rules.write_text(json.dumps(tampered))
    time.sleep(acl.RELOAD_CHECK_S + 0.2)
    assert _refused(_run(CAT, str(vol.mnt / "db" / "data")))  # refused everything
    assert _refused(_run(HEAD, str(vol.mnt / "db" / "data")))
    vol.stop()
    assert "access rules refused" in vol.log.read_text()
    r = cli("fs", "mount", str(vol.lower), str(vol.mnt), "--passphrase-file", str(vol.pwfile))
    assert r.returncode == 1 and b"refusing to mount" in r.stderr and b"MAC does not verify" in r.stderr
    rules.write_text(saved)


STAT, LS = "/usr/bin/stat", "/usr/bin/ls"


def test_kernel_caches_never_answer_a_denied_open_or_listing(vol: Mount) -> None:
    """The default --acl-timeout: opens and listings always reach the check; a lookup or stat of a
    name an allowed program just used may be answered from the kernel's cache for that long, no more."""
    _acl(vol, "add", str(vol.lower), "--allow", CAT, "--mode", "r")
    _acl(vol, "add", str(vol.lower), "--allow", LS, "--mode", "r")
    vol.start()
    data = vol.mnt / "db" / "data"
    for _ in range(3):
        assert _run(CAT, str(data)).returncode == 0
        assert _refused(_run(HEAD, str(data)))  # right after: the page cache and dentry are warm
        assert _run(LS, str(vol.mnt / "db")).returncode == 0
        r = _run(PYTHON, "-c", f"import os; print(os.listdir({str(vol.mnt / 'db')!r}))")
        assert r.returncode != 0 and "PermissionError" in r.stderr
    time.sleep(0.1 + 0.3)  # past the mount's --acl-timeout (0.1 s)
    assert _refused(_run(STAT, str(data)))


def test_strict_acl_timeout_checks_every_lookup_and_stat(vol: Mount) -> None:
    _acl(vol, "add", str(vol.lower), "--allow", CAT, "--mode", "r")
    vol.start("--acl-timeout", "0")
    data = vol.mnt / "db" / "data"
    for _ in range(3):
        assert _run(CAT, str(data)).returncode == 0
        assert _refused(_run(STAT, str(data)))  # right after the allowed read: no cached answer
        assert _refused(_run(STAT, str(vol.mnt / "app.log")))


def test_a_program_kept_on_the_mount_itself_is_checked_without_stalling_it(vol: Mount) -> None:
    # Checking the caller stats its executable, which here is a file on this mount: with
    # --acl-timeout 0 that stat is a request to the daemon made while the daemon is serving the
    # caller's open.  Another thread must serve it (fuseio.c's watcher; procid's re-check must
    # not hold the GIL through it), or the open never returns.
    vol.start()
    tool = vol.mnt / "db" / "cat"
    shutil.copy2(CAT, tool)
    _acl(vol, "add", str(vol.lower), "--allow", str(tool), "--mode", "r")
    # the exec reads the binary on behalf of the process before it becomes cat: the test's Python
    _acl(vol, "add", str(vol.lower), "--allow", PYTHON, "--path", "db/cat", "--mode", "r")
    vol.stop()
    vol.start("--acl-timeout", "0")
    data = vol.mnt / "db" / "data"
    for _ in range(3):
        r = _run(str(tool), str(data))
        assert r.returncode == 0 and r.stdout == "secret rows\n"
    assert _refused(_run(CAT, str(data)))  # the same bytes at another path


def test_rule_changes_apply_without_remounting(vol: Mount) -> None:
    _acl(vol, "add", str(vol.lower), "--allow", CAT, "--mode", "r")
    vol.start()
    assert _refused(_run(HEAD, str(vol.mnt / "app.log")))
    _acl(vol, "add", str(vol.mnt), "--allow", HEAD, "--mode", "r")  # by mountpoint, while mounted
    time.sleep(acl.RELOAD_CHECK_S + 0.2)
    assert _run(HEAD, str(vol.mnt / "app.log")).returncode == 0
    listing = json.loads(_acl(vol, "ls", str(vol.mnt), "--json").stdout)
    assert [r["program"] for r in listing["rules"]] == [CAT, HEAD]
    _acl(vol, "rm", str(vol.mnt), "r2")
    time.sleep(acl.RELOAD_CHECK_S + 0.2)
    assert _refused(_run(HEAD, str(vol.mnt / "app.log")))


def test_permissive_logs_and_allows_then_learn_proposes_the_rules(vol: Mount) -> None:
    _acl(vol, "add", str(vol.lower), "--allow", CAT, "--mode", "r")
    _acl(vol, "mode", str(vol.lower), "permissive")
    vol.start()
    r = _run(HEAD, str(vol.mnt / "db" / "data"))
    assert r.returncode == 0 and r.stdout == "secret rows\n"  # allowed, but logged
    learned = json.loads(_acl(vol, "learn", str(vol.mnt), "--json").stdout)
    assert {(p["program"], p["path"], p["mode"]) for p in learned["proposed"]} >= {(HEAD, "db/**", "r")}
    _acl(vol, "learn", str(vol.mnt), "--apply")
    _acl(vol, "mode", str(vol.mnt), "enforcing")
    time.sleep(acl.RELOAD_CHECK_S + 0.2)
    assert _run(HEAD, str(vol.mnt / "db" / "data")).returncode == 0  # the learned rule lets it pass
    assert _refused(_run(BASH, "-c", f"cat < {vol.mnt}/db/data"))
    vol.stop()
    assert "would deny: /usr/bin/head" in vol.log.read_text()


def test_update_fingerprints_after_an_upgrade(vol: Mount, tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    shutil.copy2(CAT, tool)
    _acl(vol, "add", str(vol.lower), "--allow", str(tool), "--mode", "r")
    vol.start()
    assert _run(str(tool), str(vol.mnt / "app.log")).returncode == 0
    shutil.copy2(HEAD, tool)  # "upgraded": same path, new bytes
    assert _refused(_run(str(tool), str(vol.mnt / "app.log")))
    r = cli("acl", "update-fingerprints", str(vol.mnt), "--yes", "--json", "--passphrase-file", str(vol.pwfile))
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["applied"] and out["changes"][0]["program"] == str(tool)
    time.sleep(acl.RELOAD_CHECK_S + 0.2)
    assert _run(str(tool), str(vol.mnt / "app.log")).returncode == 0


def test_denials_reach_the_key_servers_audit_log_and_wait_while_it_is_down(tmp_path: Path) -> None:
    from tests.serverproc import Deployment

    (tmp_path / "srv").mkdir()
    d = Deployment(tmp_path / "srv", None)
    m = Mount(tmp_path)
    try:
        d.start()
        d.register("acl-host")
        profile = str(d.root / "profiles" / "acl-host")
        r = cli("fs", "init", str(m.lower), "--key-server", "--profile", profile)
        assert r.returncode == 0, r.stderr
        r = cli("fs", "mount", str(m.lower), str(m.mnt), "--profile", profile)
        assert r.returncode == 0, r.stderr
        (m.mnt / "f").write_text("x")
        cli("fs", "umount", str(m.mnt))
        r = cli("acl", "add", str(m.lower), "--allow", CAT, "--mode", "r", "--profile", profile)
        assert r.returncode == 0, r.stderr
        r = cli("fs", "mount", str(m.lower), str(m.mnt), "--profile", profile)
        assert r.returncode == 0, r.stderr
        for _ in range(3):
            assert _refused(_run(HEAD, str(m.mnt / "f")))
        admin = d.admin()
        deadline = time.monotonic() + 20
        found: list[dict] = []
        while not found and time.monotonic() < deadline:
            found = [e for e in admin.audit_tail(limit=200) if e["action"] == "acl.denial"]
            time.sleep(0.3)
        assert found and found[0]["detail"]["program"] == HEAD and found[0]["outcome"] == "denied"
        assert sum(e["detail"]["count"] for e in found) >= 3  # every denial counted, batched
        rules = m.lower / acl.RULES_FILE
        saved = rules.read_text()
        rules.unlink()  # every access is denied, and the audit says why
        time.sleep(acl.RELOAD_CHECK_S + 0.2)
        assert _refused(_run(CAT, str(m.mnt / "f")))
        deadline = time.monotonic() + 20
        why: list[dict] = []
        while not why and time.monotonic() < deadline:
            why = [e for e in admin.audit_tail(limit=200) if "is missing" in e["detail"].get("reason", "")]
            time.sleep(0.3)
        assert why and why[0]["detail"]["program"] == CAT and why[0]["outcome"] == "denied"
        rules.write_text(saved)
        time.sleep(acl.RELOAD_CHECK_S + 0.2)
        d.servers[0].stop()  # unreachable: denials wait in the spool, file I/O goes on
        assert _refused(_run(HEAD, str(m.mnt / "f")))
        spool = next(Path("/run/strongroom").glob("acl-*.spool.jsonl"), None)
        deadline = time.monotonic() + 20
        while spool is None and time.monotonic() < deadline:
            time.sleep(0.3)
            spool = next(Path("/run/strongroom").glob("acl-*.spool.jsonl"), None)
        assert spool is not None and HEAD in spool.read_text()
        assert _run(CAT, str(m.mnt / "f")).stdout == "x"
    finally:
        cli("fs", "umount", str(m.mnt))
        for p in Path("/run/strongroom").glob("acl-*.spool.jsonl"):
            p.unlink()
        d.close()


def test_the_clis_acl_timeout_default_is_the_mounts() -> None:
    from strongroom.cli.fs_cmds import fs_mount
    from strongroom.fs import mount

    option = next(p for p in fs_mount.params if p.name == "acl_timeout")
    assert option.default == mount.ACL_TIMEOUT


def test_deleted_or_rolled_back_rules_deny_everything_live_and_refuse_the_mount(vol: Mount) -> None:
    """The config records (under its MAC) that the volume has rules and their lowest serial: a
    deleted rules file, or an older validly MAC'd one put back, denies every access."""
    rules = vol.lower / acl.RULES_FILE
    _acl(vol, "mode", str(vol.lower), "permissive")
    permissive = rules.read_text()  # serial 1: allows everything
    _acl(vol, "mode", str(vol.lower), "enforcing")
    _acl(vol, "add", str(vol.lower), "--allow", CAT, "--mode", "r")
    current = rules.read_text()
    floor = config.VolumeConfig.load(vol.lower).extra[config.ACL]["serial"]
    assert floor == json.loads(current)["serial"] == 3
    data = str(vol.mnt / "db" / "data")
    vol.start()
    try:
        assert _run(CAT, data).returncode == 0 and _refused(_run(HEAD, data))
        for bad, why in ((None, "is missing"), (permissive, "is older")):
            if bad is None:
                rules.unlink()
            else:
                rules.write_text(bad)
            time.sleep(acl.RELOAD_CHECK_S + 0.2)
            assert _refused(_run(CAT, data)) and _refused(_run(HEAD, data)), why
            assert _refused(_run(LS, str(vol.mnt / "db"))), why
            assert why in vol.log.read_text()
            rules.write_text(current)
            time.sleep(acl.RELOAD_CHECK_S + 0.2)
            assert _run(CAT, data).returncode == 0, why
    finally:
        vol.stop()
    for bad, why in ((None, b"is missing"), (permissive, b"is older")):
        if bad is None:
            rules.unlink()
        else:
            rules.write_text(bad)
        r = cli("fs", "mount", str(vol.lower), str(vol.mnt), "--passphrase-file", str(vol.pwfile))
        assert r.returncode == 1 and b"refusing to mount" in r.stderr and why in r.stderr, r.stderr
        rules.write_text(current)
    # removing the config's record breaks the config's MAC: the mount refuses
    cfg_path = vol.lower / config.CONFIG
    saved = cfg_path.read_text()
    stripped = json.loads(saved)
    del stripped[config.ACL]
    stripped["checksum"] = config._checksum(stripped)
    cfg_path.write_text(json.dumps(stripped))
    rules.unlink()
    r = cli("fs", "mount", str(vol.lower), str(vol.mnt), "--passphrase-file", str(vol.pwfile))
    assert r.returncode != 0 and b"parameters were changed" in r.stderr, r.stderr
    cfg_path.write_text(saved)
    rules.write_text(current)


def test_rules_added_to_a_live_mount_without_rules_are_enforced_at_once(vol: Mount) -> None:
    data = str(vol.mnt / "db" / "data")
    vol.start()
    assert _run(PYTHON, "-c", f"open({data!r}).read()").returncode == 0
    _acl(vol, "add", str(vol.mnt), "--allow", CAT, "--mode", "r")
    time.sleep(acl.RELOAD_CHECK_S + 0.2)
    assert _refused(_run(PYTHON, "-c", f"open({data!r}).read()"))
    assert _refused(_run(LS, str(vol.mnt / "db")))
    assert _run(CAT, data).returncode == 0


def test_relative_volume_and_mount_point_work_as_absolute_ones(vol: Mount) -> None:
    """The daemon leaves its working directory once mounted: relative paths are resolved at start,
    or the rules would look missing at the next reload and everyone would be denied."""
    _acl(vol, "add", str(vol.lower), "--allow", CAT, "--mode", "r")
    cwd = vol.lower.parent
    r = subprocess.run(
        [sys.executable, "-m", "strongroom.cli.main", "fs", "mount", vol.lower.name, vol.mnt.name]
        + ["--passphrase-file", vol.pwfile.name],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    try:
        time.sleep(3 * acl.RELOAD_CHECK_S)  # past a reload of the rules
        r2 = _run(CAT, "vol.mnt/db/data", cwd=cwd)
        assert r2.returncode == 0 and r2.stdout == "secret rows\n", r2.stderr
        assert _refused(_run(HEAD, "vol.mnt/db/data", cwd=cwd))
    finally:
        cli("fs", "umount", str(vol.mnt))


def test_config_and_rules_put_back_together_are_refused_by_the_host_that_saw_newer(vol: Mount, tmp_path: Path) -> None:
    """An earlier (config, rules) pair is valid on its own; only this host's record of the newer
    serial can tell (docs/ACL.md).  Another host, without that record, cannot."""
    cfg_path, rules = vol.lower / config.CONFIG, vol.lower / acl.RULES_FILE
    before_cfg = cfg_path.read_bytes()  # before the volume had rules
    _acl(vol, "mode", str(vol.lower), "permissive")
    old_pair = (cfg_path.read_bytes(), rules.read_bytes())
    _acl(vol, "mode", str(vol.lower), "enforcing")
    _acl(vol, "add", str(vol.lower), "--allow", CAT, "--mode", "r")
    for cfg_bytes, rules_bytes in ((old_pair[0], old_pair[1]), (before_cfg, None)):
        cfg_path.write_bytes(cfg_bytes)
        if rules_bytes is None:
            rules.unlink()
        else:
            rules.write_bytes(rules_bytes)
        r = cli("fs", "mount", str(vol.lower), str(vol.mnt), "--passphrase-file", str(vol.pwfile))
        assert r.returncode == 1 and b"put back to an earlier state" in r.stderr, r.stderr
        other_host = {"STRONGROOM_STATE_DIR": str(tmp_path / "other-host")}
        r = cli("fs", "fsck", str(vol.lower), "--passphrase-file", str(vol.pwfile), env=other_host)
        assert r.returncode == 0, r.stdout  # what another host sees: a valid volume
    # writing the rules again moves on, past the serial the host saw
    cfg_path.write_bytes(old_pair[0])
    rules.write_bytes(old_pair[1])
    _acl(vol, "mode", str(vol.lower), "enforcing")
    vol.start()
    assert _refused(_run(HEAD, str(vol.mnt / "db" / "data")))
