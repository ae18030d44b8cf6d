"""The CLI conventions: --json, exit codes, one readable error line, env vars for profile, data, passphrase."""

from __future__ import annotations

import json
from pathlib import Path

from tests.serverproc import PASSPHRASE, Deployment, cli


def _one_line_error(r) -> str:  # type: ignore[no-untyped-def]
    assert r.returncode != 0
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("strongroom: error: "), r.stderr
    assert b"Traceback" not in r.stderr
    return lines[0]


def test_client_commands_end_to_end(running: Deployment, tmp_path: Path) -> None:
    prof = tmp_path / "prof"
    env = {"STRONGROOM_PROFILE": str(prof), "STRONGROOM_AUTH_SECRET": running.secret}
    r = cli(
        "register",
        "--server",
        running.url,
        "--ca",
        str(running.data.ca_file),
        "--org",
        "default",
        "--name",
        "cli-host",
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    client_id = json.loads(r.stdout)["client_id"]
    r = cli("register", "--server", running.url, "--ca", str(running.data.ca_file), "--org", "default", env=env)
    assert "already exists" in _one_line_error(r)

    secret_file = tmp_path / "secret.bin"
    secret_file.write_bytes(b"\x00\x01binary\xff")
    r = cli("put", "k", str(secret_file), "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout) == {"name": "k", "version": 1}
    r = cli("put", "k", "-", "--max-retrievals", "10", "--expires", "1d", env=env, input=b"from stdin")
    assert r.returncode == 0 and b"version 2" in r.stdout
    assert cli("get", "k", env=env).stdout == b"from stdin"
    out = tmp_path / "out.bin"
    assert cli("get", "k", "--version", "1", "-o", str(out), env=env).returncode == 0
    assert out.read_bytes() == b"\x00\x01binary\xff" and out.stat().st_mode & 0o777 == 0o600
    listing = json.loads(cli("ls", "--json", env=env).stdout)
    assert listing[0]["name"] == "k" and listing[0]["policy"]["max_retrievals"] == 10
    assert json.loads(cli("whoami", "--json", env=env).stdout)["client_id"] == client_id
    r = cli("entropy", "--bytes", "48", env=env)
    assert r.returncode == 0 and len(r.stdout) == 48
    assert len(bytes.fromhex(json.loads(cli("entropy", "--bytes", "16", "--json", env=env).stdout)["hex"])) == 16
    r = cli("policy", "deposit", "k", "--reader", "group:none", env=env)
    assert "no such group" in _one_line_error(r)
    assert cli("rm", "k", env=env).returncode == 0
    assert "no such deposit" in _one_line_error(cli("get", "k", env=env))
    assert "NotFound" in _one_line_error(cli("get", "k", env=env))


def test_errors_are_one_line(running: Deployment, tmp_path: Path) -> None:
    env = {"STRONGROOM_PROFILE": str(tmp_path / "none")}
    assert "no client profile" in _one_line_error(cli("get", "x", env=env))
    assert "no data dir" in _one_line_error(cli("server", "backup", "--out", str(tmp_path / "b"), env={"STRONGROOM_DATA": ""}))
    assert "not a Strongroom data dir" in _one_line_error(cli("server", "start", "--data", str(tmp_path / "empty"), "--sealed"))
    r = cli("server", "audit", "verify", "--data", str(running.data.path), env={"STRONGROOM_PASSPHRASE": "wrong"})
    assert "wrong passphrase" in _one_line_error(r)
    r = cli("server", "init", "--data", str(running.data.path), env={"STRONGROOM_PASSPHRASE": PASSPHRASE})
    assert "not empty" in _one_line_error(r)
    # nothing to read the passphrase from: no file, no env, no terminal
    r = cli("server", "init", "--data", str(tmp_path / "new"), env={"STRONGROOM_PASSPHRASE": ""})
    assert "no passphrase" in _one_line_error(r)
    assert not (tmp_path / "new").exists()
    r = cli(
        "register", "--server", "http://127.0.0.1:1", "--org", "default", "--auth-secret", "x", "--profile", str(tmp_path / "p")
    )
    assert "https" in _one_line_error(r)
    r = cli("server", "start", "--data", str(running.data.path), "--listen", "nonsense", "--sealed")
    assert "HOST:PORT" in _one_line_error(r)
    r = cli(
        "server",
        "init",
        "--data",
        str(tmp_path / "pg"),
        "--db",
        "postgresql://nobody@127.0.0.1:1/none",
        env={"STRONGROOM_PASSPHRASE": "x"},
    )
    assert "database unavailable" in _one_line_error(r)
    assert not (tmp_path / "pg").exists()  # nothing half-made is left behind


def test_admin_commands_with_data_env(running: Deployment) -> None:
    env = {"STRONGROOM_DATA": str(running.data.path)}
    srv = ("--server", running.url)
    r = cli("org", "create", "ops", *srv, "--json", env=env)
    assert r.returncode == 0 and len(json.loads(r.stdout)["auth_secret"]) >= 43
    orgs = json.loads(cli("org", "list", *srv, "--json", env=env).stdout)
    assert {o["name"] for o in orgs} == {"default", "ops"}
    assert cli("org", "rotate-secret", "ops", *srv, env=env).returncode == 0
    c = running.register("member")
    assert cli("group", "create", "dbs", *srv, env=env).returncode == 0
    r = cli("group", "add", "dbs", c.client_id, *srv, "--json", env=env)
    assert json.loads(r.stdout)["members"] == [c.client_id]
    assert json.loads(cli("group", "ls", *srv, "--json", env=env).stdout)[0]["members"] == [c.client_id]
    assert cli("group", "rm", "dbs", c.client_id, *srv, env=env).returncode == 0
    assert cli("group", "rm", "dbs", *srv, env=env).returncode == 0
    for action in ("disable", "enable", "revoke"):
        r = cli("client", action, c.client_id, *srv, "--json", env=env)
        assert r.returncode == 0, r.stderr
    clients = json.loads(cli("client", "list", *srv, "--json", env=env).stdout)
    assert {x["client_id"]: x["status"] for x in clients}[c.client_id] == "revoked"
    tail = json.loads(cli("server", "audit", "tail", "-n", "5", *srv, "--json", env=env).stdout)
    assert len(tail) == 5 and tail[-1]["action"] == "client.revoke"
    r = cli("client", "revoke", "c_AAAAAAAAAAAAAAAA", *srv, env=env)
    assert "no client" in _one_line_error(r)


def test_every_command_has_help_with_an_example() -> None:
    import click

    from strongroom.cli.main import cli as root

    def walk(cmd: click.Command, path: list[str]):  # type: ignore[no-untyped-def]
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield path

    paths = list(walk(root, []))
    assert len(paths) > 25
    for path in paths:
        r = cli(*path, "--help")
        assert r.returncode == 0 and b"Example" in r.stdout, path


def test_a_passphrase_file_is_utf8_with_its_bom_and_line_ends_dropped(tmp_path: Path) -> None:
    """FORMAT.md §4: the same passphrase written by an editor that adds a byte-order mark and CRLF
    opens the volume; a file in another encoding, or far too big, is one readable error line."""
    phrase = "pässwörd ünd mehr"
    plain = tmp_path / "plain"
    plain.write_bytes(phrase.encode())
    vol = tmp_path / "vol"
    assert cli("fs", "init", str(vol), "--passphrase", "--passphrase-file", str(plain)).returncode == 0
    windows = tmp_path / "windows"
    windows.write_bytes(b"\xef\xbb\xbf" + phrase.encode() + b"\r\n")
    r = cli("fs", "fsck", str(vol), "--passphrase-file", str(windows))
    assert r.returncode == 0, r.stderr
    latin1 = tmp_path / "latin1"
    latin1.write_bytes(phrase.encode("latin-1"))
    assert "is not UTF-8 text" in _one_line_error(cli("fs", "fsck", str(vol), "--passphrase-file", str(latin1)))
    huge = tmp_path / "huge"
    huge.write_bytes(b"x" * (1 << 20))
    assert "not a passphrase file" in _one_line_error(cli("fs", "fsck", str(vol), "--passphrase-file", str(huge)))
    kept = tmp_path / "kept"  # a space, a tab or a BOM elsewhere is part of the passphrase
    kept.write_bytes(phrase.encode() + b" \n")
    assert "wrong passphrase" in _one_line_error(cli("fs", "fsck", str(vol), "--passphrase-file", str(kept)))
