"""KMIP on PostgreSQL with two servers on one database: an object made through one server's
KMIP listener is located, fetched and destroyed through the other's, with one audit chain."""

from __future__ import annotations

from pathlib import Path

from strongroom.server.kmip import tags as t
from strongroom.server.kmip.ttlv import e, i, s, txt
from tests.server.kmip.kmiphelp import Raw, issue, results
from tests.serverproc import Deployment


def test_two_servers_one_database(pg_deployment: Deployment, tmp_path: Path) -> None:
    d = pg_deployment
    one, two = d.start(kmip=True), d.start(kmip=True)
    files = issue(d.register("pg-app", server=one), tmp_path / "certs")
    a, b = Raw(one.kmip, files), Raw(two.kmip, files)
    try:
        name = s(t.NAME, txt(t.NAME_VALUE, "pg-key"), e(t.NAME_TYPE, t.UNINTERPRETED_TEXT_STRING))
        attrs = s(t.ATTRIBUTES, e(t.CRYPTOGRAPHIC_ALGORITHM, t.AES), i(t.CRYPTOGRAPHIC_LENGTH, 256), name)
        create = s(t.REQUEST_PAYLOAD, e(t.OBJECT_TYPE, t.SYMMETRIC_KEY_TYPE), attrs)
        made = results(a.call((t.OP_CREATE, create), version=(2, 0)))
        uid = made[0][2].need(t.UNIQUE_IDENTIFIER, t.TEXT)  # type: ignore[union-attr]
        found = results(b.call((t.OP_LOCATE, s(t.REQUEST_PAYLOAD, s(t.ATTRIBUTES, name))), version=(2, 0)))
        assert [x.value for x in found[0][2].all(t.UNIQUE_IDENTIFIER)] == [uid]  # type: ignore[union-attr]
        got_b = results(b.call((t.OP_GET, s(t.REQUEST_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, uid)))))
        got_a = results(a.call((t.OP_GET, s(t.REQUEST_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, uid)))))
        assert got_a[0][0] == got_b[0][0] == t.SUCCESS and got_a[0][2] == got_b[0][2]  # the same key from either
        assert results(b.call((t.OP_DESTROY, s(t.REQUEST_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, uid)))))[0][0] == t.SUCCESS
        gone = results(a.call((t.OP_GET, s(t.REQUEST_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, uid)))))
        assert gone[0][:2] == (t.OPERATION_FAILED, t.ITEM_NOT_FOUND)
    finally:
        a.close()
        b.close()
    entries = [x for x in d.admin(one).audit_tail(limit=1000) if str(uid) in x["target"]]
    assert [(x["action"], x["outcome"]) for x in entries] == [
        ("kmip.create", "ok"), ("kmip.get", "ok"), ("kmip.get", "ok"), ("kmip.destroy", "ok"), ("kmip.get", "denied"),
    ]  # fmt: skip
