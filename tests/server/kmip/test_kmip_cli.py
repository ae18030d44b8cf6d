"""`strongroom kmip cert` as a user runs it (the key made on the host, the files written where
asked, a certificate the KMIP listener maps to that client), `strongroom ls` showing KMIP
objects, `strongroom rm` destroying one, and a sealed server answering KMIP with a failure, not a
dropped connection."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import NameOID

from strongroom.server.kmip import tags as t
from strongroom.server.kmip.ttlv import e, i, s, txt
from tests.server.kmip.kmiphelp import Raw, results
from tests.serverproc import PASSPHRASE, Deployment, cli, eventually


def test_kmip_cert_ls_rm_and_sealed(tmp_path: Path) -> None:
    d = Deployment(tmp_path, None)
    try:
        srv = d.start(kmip=True)
        prof = tmp_path / "prof"
        env = {"STRONGROOM_PROFILE": str(prof), "STRONGROOM_AUTH_SECRET": d.secret}
        ca = str(d.data.ca_file)
        r = cli("register", "--server", srv.url, "--ca", ca, "--org", "default", "--name", "db-1", "--json", env=env)
        assert r.returncode == 0, r.stderr
        client_id = json.loads(r.stdout)["client_id"]
        out = tmp_path / "kmip"
        r = cli("kmip", "cert", "--out", str(out), "--key-type", "rsa", "--days", "30", env=env)
        assert r.returncode == 0, r.stderr
        assert client_id.encode() in r.stdout
        assert stat.S_IMODE((out / "client-key.pem").stat().st_mode) == 0o600
        cert = x509.load_pem_x509_certificate((out / "client.pem").read_bytes())
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == client_id
        assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days in (29, 30)
        # again, over a symlink and a FIFO planted where the files go: neither followed nor opened
        victim = tmp_path / "victim"
        victim.write_text("untouched")
        (out / "client.pem").unlink()
        (out / "client.pem").symlink_to(victim)
        (out / "ca.pem").unlink()
        os.mkfifo(out / "ca.pem")
        r = cli("kmip", "cert", "--out", str(out), env=env, timeout=30)
        assert r.returncode == 0, r.stderr
        assert victim.read_text() == "untouched"
        assert all((out / n).is_file() and not (out / n).is_symlink() for n in ("client.pem", "ca.pem", "client-key.pem"))
        r = cli("kmip", "cert", "--out", "/proc/no-such/kmip", env=env)
        lines = r.stderr.decode().strip().splitlines()
        assert r.returncode != 0 and len(lines) == 1 and lines[0].startswith("strongroom: error: cannot write"), r.stderr

        files = (out / "client.pem", out / "client-key.pem", out / "ca.pem")
        conn = Raw(srv.kmip, files)
        aes = s(t.ATTRIBUTES, e(t.CRYPTOGRAPHIC_ALGORITHM, t.AES), i(t.CRYPTOGRAPHIC_LENGTH, 256))
        made = results(
            conn.call((t.OP_CREATE, s(t.REQUEST_PAYLOAD, e(t.OBJECT_TYPE, t.SYMMETRIC_KEY_TYPE), aes)), version=(2, 0))
        )
        uid = str(made[0][2].need(t.UNIQUE_IDENTIFIER, t.TEXT))  # type: ignore[union-attr]
        listing = cli("ls", env=env).stdout.decode()
        assert f"kmip-{uid}" in listing and "SymmetricKey Pre-Active" in listing

        def material() -> bytes:
            got = results(conn.call((t.OP_GET, s(t.REQUEST_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, uid)))))[0][2]
            return bytes(got.find(t.SYMMETRIC_KEY).find(t.KEY_BLOCK).find(t.KEY_VALUE).need(t.KEY_MATERIAL, t.BYTES))  # type: ignore[union-attr]

        key = material()
        assert cli("get", f"kmip-{uid}", env=env).stdout == key  # a deposit like any other to its owner
        assert cli("put", f"kmip-{uid}", "-", env=env, input=b"not the key").returncode == 0
        assert material() == key  # KMIP's value never changes under its identifier

        d.admin().seal()  # sealed: an answer with a reason, the connection kept
        get = (t.OP_GET, s(t.REQUEST_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, uid)))
        out_sealed = results(conn.call(get))
        assert out_sealed[0][:2] == (t.OPERATION_FAILED, t.GENERAL_FAILURE)
        d.admin().unseal(passphrase=PASSPHRASE)
        eventually(lambda: results(conn.call(get))[0][0] == t.SUCCESS)  # the writer takes its grant at its tick

        assert cli("rm", f"kmip-{uid}", env=env).returncode == 0  # the deposit and the KMIP object go together
        assert results(conn.call(get))[0][:2] == (t.OPERATION_FAILED, t.ITEM_NOT_FOUND)
        conn.close()
    finally:
        d.close()
