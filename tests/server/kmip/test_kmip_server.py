"""KMIP against a real server over TLS, as raw TTLV: the operations and forms PyKMIP's client
does not send (1.x Add Attribute, 2.0 attributes, GCM, ReKey's links, batches with the ID
placeholder and both error options), who may use whose object, what lands in the audit log and
in `strongroom ls`."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from strongroom.server.kmip import tags as t
from strongroom.server.kmip.ttlv import Item, b, dt, e, i, s, txt
from tests.server.kmip.kmiphelp import Raw, issue, results
from tests.serverproc import Deployment


def attr(name: str, value: Item) -> Item:
    return s(t.ATTRIBUTE, txt(t.ATTRIBUTE_NAME, name), Item(t.ATTRIBUTE_VALUE, value.kind, value.value))


def aes_template(length: int = 256, name: str | None = None, mask: int = t.USAGE_ENCRYPT | t.USAGE_DECRYPT) -> Item:
    parts = [
        attr("Cryptographic Algorithm", e(0, t.AES)),
        attr("Cryptographic Length", i(0, length)),
        attr("Cryptographic Usage Mask", i(0, mask)),
    ]
    if name is not None:
        parts.append(attr("Name", s(0, txt(t.NAME_VALUE, name), e(t.NAME_TYPE, t.UNINTERPRETED_TEXT_STRING))))
    return s(t.TEMPLATE_ATTRIBUTE, *parts)


def create(uid_less: bool = False, **kw: Any) -> tuple[int, Item]:
    return t.OP_CREATE, s(t.REQUEST_PAYLOAD, e(t.OBJECT_TYPE, t.SYMMETRIC_KEY_TYPE), aes_template(**kw))


def on(op: int, uid: str | None, *more: Item) -> tuple[int, Item]:
    return op, s(t.REQUEST_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, uid) if uid else None, *more)


def ok(response: Item) -> list[Item]:
    out = results(response)
    assert all(status == t.SUCCESS for status, _, _ in out), [(st, r, p) for st, r, p in out]
    return [p for _, _, p in out]  # type: ignore[misc]


def uid_of(payload: Item) -> str:
    return str(payload.need(t.UNIQUE_IDENTIFIER, t.TEXT))


@pytest.fixture(scope="module")
def kmip(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("kmip")
    d = Deployment(root, None)
    try:
        srv = d.start(kmip=True)
        a, b_ = d.register("app-a"), d.register("app-b")
        yield {"d": d, "srv": srv, "a": a, "b": b_, "fa": issue(a, root / "fa"), "fb": issue(b_, root / "fb"), "root": root}
    finally:
        d.close()


@pytest.fixture
def conn_a(kmip: dict[str, Any]) -> Iterator[Raw]:
    c = Raw(kmip["srv"].kmip, kmip["fa"])
    yield c
    c.close()


@pytest.fixture
def conn_b(kmip: dict[str, Any]) -> Iterator[Raw]:
    c = Raw(kmip["srv"].kmip, kmip["fb"])
    yield c
    c.close()


def test_batch_with_id_placeholder_and_error_options(conn_a: Raw) -> None:
    # Create then Activate then Get without naming the object: each uses the one before it
    created, activated, got = ok(conn_a.call(create(), (t.OP_ACTIVATE, None), (t.OP_GET, None)))
    uid = uid_of(created)
    assert uid_of(activated) == uid and uid_of(got) == uid
    block = got.find(t.SYMMETRIC_KEY).find(t.KEY_BLOCK)  # type: ignore[union-attr]
    assert len(block.find(t.KEY_VALUE).need(t.KEY_MATERIAL, t.BYTES)) == 32  # type: ignore[union-attr]
    # Stop (the default): the failing item answers, the rest are not run
    out = results(conn_a.call(on(t.OP_GET, "no-such"), on(t.OP_GET, uid)))
    assert [(st, r) for st, r, _ in out] == [(t.OPERATION_FAILED, t.ITEM_NOT_FOUND)]
    # Continue: every item runs and answers
    out = results(conn_a.call(on(t.OP_GET, "no-such"), on(t.OP_GET, uid), option=t.BATCH_CONTINUE))
    assert [st for st, _, _ in out] == [t.OPERATION_FAILED, t.SUCCESS]
    # Undo is refused whole, with a reason; the connection stays usable
    out = results(conn_a.call(on(t.OP_GET, uid), option=t.BATCH_UNDO))
    assert out[0][:2] == (t.OPERATION_FAILED, t.FEATURE_NOT_SUPPORTED)
    assert results(conn_a.call(on(t.OP_GET, uid)))[0][0] == t.SUCCESS


def test_add_modify_delete_attribute_v1(conn_a: Raw) -> None:
    (created,) = ok(conn_a.call(create(name="first")))
    uid = uid_of(created)
    second = s(0, txt(t.NAME_VALUE, "second"), e(t.NAME_TYPE, t.UNINTERPRETED_TEXT_STRING))
    (added,) = ok(conn_a.call(on(t.OP_ADD_ATTRIBUTE, uid, attr("Name", second))))
    assert added.find(t.ATTRIBUTE).get(t.ATTRIBUTE_INDEX, t.INTEGER) == 1  # type: ignore[union-attr]
    ok(conn_a.call(on(t.OP_ADD_ATTRIBUTE, uid, attr("x-owner-team", txt(0, "payments")))))
    # a single-valued attribute cannot be added twice; a server-set one cannot be added at all
    out = results(
        conn_a.call(
            on(t.OP_ADD_ATTRIBUTE, uid, attr("Contact Information", txt(0, "a"))),
            on(t.OP_ADD_ATTRIBUTE, None, attr("Contact Information", txt(0, "b"))),
        )
    )
    assert out[1][:2] == (t.OPERATION_FAILED, t.ILLEGAL_OPERATION)
    out = results(conn_a.call(on(t.OP_ADD_ATTRIBUTE, uid, attr("State", e(0, t.ACTIVE)))))
    assert out[0][:2] == (t.OPERATION_FAILED, t.PERMISSION_DENIED)
    # modify value 1 of Name, delete value 0: "second-b" is left
    third = s(0, txt(t.NAME_VALUE, "second-b"), e(t.NAME_TYPE, t.UNINTERPRETED_TEXT_STRING))
    mod = s(
        t.ATTRIBUTE, txt(t.ATTRIBUTE_NAME, "Name"), i(t.ATTRIBUTE_INDEX, 1), Item(t.ATTRIBUTE_VALUE, t.STRUCTURE, third.value)
    )
    ok(conn_a.call(on(t.OP_MODIFY_ATTRIBUTE, uid, mod)))
    ok(conn_a.call(on(t.OP_DELETE_ATTRIBUTE, uid, txt(t.ATTRIBUTE_NAME, "Name"), i(t.ATTRIBUTE_INDEX, 0))))
    (got,) = ok(conn_a.call(on(t.OP_GET_ATTRIBUTES, uid, txt(t.ATTRIBUTE_NAME, "Name"), txt(t.ATTRIBUTE_NAME, "x-owner-team"))))
    names = [a.find(t.ATTRIBUTE_VALUE) for a in got.all(t.ATTRIBUTE)]
    assert [n.get(t.NAME_VALUE, t.TEXT) if n.kind == t.STRUCTURE else n.value for n in names] == ["second-b", "payments"]  # type: ignore[union-attr]
    (listed,) = ok(conn_a.call(on(t.OP_GET_ATTRIBUTE_LIST, uid)))
    assert {x.value for x in listed.all(t.ATTRIBUTE_NAME)} >= {"Name", "x-owner-team", "State", "Cryptographic Length"}
    out = results(conn_a.call(on(t.OP_DELETE_ATTRIBUTE, uid, txt(t.ATTRIBUTE_NAME, "Cryptographic Length"))))
    assert out[0][:2] == (t.OPERATION_FAILED, t.PERMISSION_DENIED)


def test_kmip_2_0_forms(conn_a: Raw) -> None:
    name = s(t.NAME, txt(t.NAME_VALUE, "v2-key"), e(t.NAME_TYPE, t.UNINTERPRETED_TEXT_STRING))
    attrs = s(
        t.ATTRIBUTES, e(t.CRYPTOGRAPHIC_ALGORITHM, t.AES), i(t.CRYPTOGRAPHIC_LENGTH, 128), i(t.CRYPTOGRAPHIC_USAGE_MASK, 12), name
    )
    (created,) = ok(
        conn_a.call((t.OP_CREATE, s(t.REQUEST_PAYLOAD, e(t.OBJECT_TYPE, t.SYMMETRIC_KEY_TYPE), attrs)), version=(2, 0))
    )
    uid = uid_of(created)
    ref = Item(t.ATTRIBUTE_REFERENCE, t.ENUM, t.CRYPTOGRAPHIC_LENGTH)
    (got,) = ok(conn_a.call(on(t.OP_GET_ATTRIBUTES, uid, ref), version=(2, 0)))
    assert got.find(t.ATTRIBUTES).get(t.CRYPTOGRAPHIC_LENGTH, t.INTEGER) == 128  # type: ignore[union-attr]
    ok(
        conn_a.call(
            on(t.OP_SET_ATTRIBUTE, uid, s(t.NEW_ATTRIBUTE, txt(t.CONTACT_INFORMATION, "ops@example.org"))), version=(2, 0)
        )
    )
    (listed,) = ok(conn_a.call(on(t.OP_GET_ATTRIBUTE_LIST, uid), version=(2, 0)))
    assert t.CONTACT_INFORMATION in {x.value for x in listed.all(t.ATTRIBUTE_REFERENCE)}
    # Locate by 2.0 attributes: algorithm, length and state together
    want = s(t.ATTRIBUTES, e(t.CRYPTOGRAPHIC_ALGORITHM, t.AES), i(t.CRYPTOGRAPHIC_LENGTH, 128), e(t.STATE, t.PRE_ACTIVE))
    (found,) = ok(conn_a.call((t.OP_LOCATE, s(t.REQUEST_PAYLOAD, want)), version=(2, 0)))
    assert uid in [x.value for x in found.all(t.UNIQUE_IDENTIFIER)]
    assert found.get(t.LOCATED_ITEMS, t.INTEGER) >= 1  # Located Items
    (versions,) = ok(conn_a.call((t.OP_DISCOVER_VERSIONS, None), version=(2, 0)))
    assert [(v.value[0].value, v.value[1].value) for v in versions.all(t.PROTOCOL_VERSION)][:2] == [(2, 0), (1, 4)]


def test_gcm_and_cbc_without_padding(conn_a: Raw) -> None:
    created, _ = ok(conn_a.call(create(), (t.OP_ACTIVATE, None)))
    uid = uid_of(created)
    gcm = s(t.CRYPTOGRAPHIC_PARAMETERS, e(t.BLOCK_CIPHER_MODE, t.GCM), e(t.CRYPTOGRAPHIC_ALGORITHM, t.AES), i(t.TAG_LENGTH, 16))
    aad = b(t.AUTHENTICATED_ENCRYPTION_ADDITIONAL_DATA, b"header")
    (enc,) = ok(conn_a.call(on(t.OP_ENCRYPT, uid, gcm, b(t.DATA, b"field value"), aad)))
    ct, nonce = enc.need(t.DATA, t.BYTES), enc.need(t.IV_COUNTER_NONCE, t.BYTES)
    tag = enc.need(t.AUTHENTICATED_ENCRYPTION_TAG, t.BYTES)
    assert len(nonce) == 12 and len(tag) == 16 and ct != b"field value"
    back = [b(t.DATA, ct), b(t.IV_COUNTER_NONCE, nonce), aad]
    (dec,) = ok(conn_a.call(on(t.OP_DECRYPT, uid, gcm, *back, b(t.AUTHENTICATED_ENCRYPTION_TAG, tag))))
    assert dec.need(t.DATA, t.BYTES) == b"field value"
    bad = bytes([tag[0] ^ 1]) + tag[1:]
    out = results(conn_a.call(on(t.OP_DECRYPT, uid, gcm, *back, b(t.AUTHENTICATED_ENCRYPTION_TAG, bad))))
    assert out[0][:2] == (t.OPERATION_FAILED, t.CRYPTOGRAPHIC_FAILURE)
    plain = s(t.CRYPTOGRAPHIC_PARAMETERS, e(t.BLOCK_CIPHER_MODE, t.CBC), e(t.PADDING_METHOD, t.PADDING_NONE))
    out = results(conn_a.call(on(t.OP_ENCRYPT, uid, plain, b(t.DATA, b"15 bytes only!!"))))
    assert out[0][:2] == (t.OPERATION_FAILED, t.INVALID_FIELD)
    iv = bytes(16)
    (enc,) = ok(conn_a.call(on(t.OP_ENCRYPT, uid, plain, b(t.DATA, b"x" * 32), b(t.IV_COUNTER_NONCE, iv))))
    assert enc.find(t.IV_COUNTER_NONCE) is None and len(enc.need(t.DATA, t.BYTES)) == 32  # the client's IV: not echoed


def test_rekey_links_and_moves_names(conn_a: Raw) -> None:
    created, _ = ok(conn_a.call(create(name="rotating"), (t.OP_ACTIVATE, None)))
    old = uid_of(created)
    (rekeyed,) = ok(conn_a.call(on(t.OP_REKEY, old)))
    new = uid_of(rekeyed)
    assert new != old
    (new_attrs,) = ok(conn_a.call(on(t.OP_GET_ATTRIBUTES, new)))
    (old_attrs,) = ok(conn_a.call(on(t.OP_GET_ATTRIBUTES, old)))

    def by_name(p: Item, name: str) -> list[Item]:
        return [a.find(t.ATTRIBUTE_VALUE) for a in p.all(t.ATTRIBUTE) if a.get(t.ATTRIBUTE_NAME, t.TEXT) == name]  # type: ignore[misc]

    assert [n.get(t.NAME_VALUE, t.TEXT) for n in by_name(new_attrs, "Name")] == ["rotating"]
    assert by_name(old_attrs, "Name") == []
    assert [(x.get(t.LINK_TYPE, t.ENUM), x.get(t.LINKED_OBJECT_IDENTIFIER, t.TEXT)) for x in by_name(new_attrs, "Link")] == [
        (t.REPLACED_OBJECT_LINK, old)
    ]
    assert [(x.get(t.LINK_TYPE, t.ENUM), x.get(t.LINKED_OBJECT_IDENTIFIER, t.TEXT)) for x in by_name(old_attrs, "Link")] == [
        (t.REPLACEMENT_OBJECT_LINK, new)
    ]
    assert [x.value for x in by_name(new_attrs, "State")] == [t.ACTIVE]
    # Locate by the name finds the new key only
    name = attr("Name", s(0, txt(t.NAME_VALUE, "rotating"), e(t.NAME_TYPE, t.UNINTERPRETED_TEXT_STRING)))
    (found,) = ok(conn_a.call((t.OP_LOCATE, s(t.REQUEST_PAYLOAD, name))))
    assert [x.value for x in found.all(t.UNIQUE_IDENTIFIER)] == [new]


def test_revoke_compromised_then_destroy(conn_a: Raw) -> None:
    created, _ = ok(conn_a.call(create(), (t.OP_ACTIVATE, None)))
    uid = uid_of(created)
    reason = s(t.REVOCATION_REASON, e(t.REVOCATION_REASON_CODE, t.KEY_COMPROMISE), txt(t.REVOCATION_MESSAGE, "laptop lost"))
    ok(conn_a.call(on(t.OP_REVOKE, uid, reason, dt(t.COMPROMISE_OCCURRENCE_DATE, 1_700_000_000))))
    (got,) = ok(
        conn_a.call(
            on(t.OP_GET_ATTRIBUTES, uid, txt(t.ATTRIBUTE_NAME, "State"), txt(t.ATTRIBUTE_NAME, "Compromise Occurrence Date"))
        )
    )
    values = {a.get(t.ATTRIBUTE_NAME, t.TEXT): a.find(t.ATTRIBUTE_VALUE).value for a in got.all(t.ATTRIBUTE)}  # type: ignore[union-attr]
    assert values == {"State": t.COMPROMISED, "Compromise Occurrence Date": 1_700_000_000}
    out = results(conn_a.call(on(t.OP_ACTIVATE, uid)))
    assert out[0][:2] == (t.OPERATION_FAILED, t.PERMISSION_DENIED)
    ok(conn_a.call(on(t.OP_DESTROY, uid)))
    for op in (t.OP_GET, t.OP_GET_ATTRIBUTES, t.OP_DESTROY):
        assert results(conn_a.call(on(op, uid)))[0][:2] == (t.OPERATION_FAILED, t.ITEM_NOT_FOUND)


def test_query_and_unsupported(conn_a: Raw) -> None:
    info = s(t.REQUEST_PAYLOAD, e(t.QUERY_FUNCTION, t.QUERY_SERVER_INFORMATION), e(t.QUERY_FUNCTION, t.QUERY_OPERATIONS))
    (q,) = ok(conn_a.call((t.OP_QUERY, info)))
    assert q.get(t.VENDOR_IDENTIFICATION, t.TEXT) == "Strongroom"
    assert {x.value for x in q.all(t.OPERATION)} >= {t.OP_CREATE, t.OP_GET, t.OP_ENCRYPT, t.OP_REKEY, t.OP_ADD_ATTRIBUTE}
    out = results(conn_a.call((0x02, s(t.REQUEST_PAYLOAD))))  # Create Key Pair
    assert out[0][:2] == (t.OPERATION_FAILED, t.OPERATION_NOT_SUPPORTED)
    out = results(conn_a.call((t.OP_GET, s(t.REQUEST_PAYLOAD)), version=(3, 0)))
    assert out[0][:2] == (t.OPERATION_FAILED, t.INVALID_MESSAGE)
    (created,) = ok(conn_a.call(create()))
    out = results(conn_a.call(on(t.OP_GET, uid_of(created), e(t.KEY_FORMAT_TYPE, 0x03))))  # PKCS#1 for an AES key
    assert out[0][:2] == (t.OPERATION_FAILED, t.KEY_FORMAT_TYPE_NOT_SUPPORTED)
    out = results(
        conn_a.call((t.OP_CREATE, s(t.REQUEST_PAYLOAD, e(t.OBJECT_TYPE, t.SYMMETRIC_KEY_TYPE), aes_template(length=100))))
    )
    assert out[0][:2] == (t.OPERATION_FAILED, t.INVALID_FIELD)
    big = s(t.REQUEST_PAYLOAD, e(t.OBJECT_TYPE, t.SECRET_DATA_OBJECT))  # no object
    assert results(conn_a.call((t.OP_REGISTER, big)))[0][:2] == (t.OPERATION_FAILED, t.INVALID_FIELD)


def test_other_clients_objects_and_policy(kmip: dict[str, Any], conn_a: Raw, conn_b: Raw) -> None:
    created, _ = ok(conn_a.call(create(name="a-only"), (t.OP_ACTIVATE, None)))
    uid = uid_of(created)
    whole = {  # each operation with all it needs, so that only the object's owner decides
        t.OP_REVOKE: [s(t.REVOCATION_REASON, e(t.REVOCATION_REASON_CODE, t.KEY_COMPROMISE))],
        t.OP_ENCRYPT: [b(t.DATA, b"x")],
        t.OP_ADD_ATTRIBUTE: [attr("x-mine", txt(0, "b"))],
    }
    for op in (t.OP_GET, t.OP_GET_ATTRIBUTES, t.OP_DESTROY, t.OP_REVOKE, t.OP_ENCRYPT, t.OP_ADD_ATTRIBUTE, t.OP_REKEY):
        assert results(conn_b.call(on(op, uid, *whole.get(op, []))))[0][:2] == (t.OPERATION_FAILED, t.ITEM_NOT_FOUND), op
    (found,) = ok(conn_b.call((t.OP_LOCATE, s(t.REQUEST_PAYLOAD))))
    assert uid not in [x.value for x in found.all(t.UNIQUE_IDENTIFIER)]
    # the owner names B a reader of the object's deposit: B may Get and Locate it, not change it
    kmip["a"].set_policy(f"kmip-{uid}", readers=[f"client:{kmip['b'].client_id}"])
    (got,) = ok(conn_b.call(on(t.OP_GET, uid)))
    assert uid_of(got) == uid
    (found,) = ok(conn_b.call((t.OP_LOCATE, s(t.REQUEST_PAYLOAD))))
    assert uid in [x.value for x in found.all(t.UNIQUE_IDENTIFIER)]
    for op in (t.OP_DESTROY, t.OP_ACTIVATE, t.OP_REKEY, t.OP_REVOKE, t.OP_ADD_ATTRIBUTE):
        assert results(conn_b.call(on(op, uid, *whole.get(op, []))))[0][:2] == (t.OPERATION_FAILED, t.PERMISSION_DENIED), op
    # a reader may use the key it may read
    cbc = s(t.CRYPTOGRAPHIC_PARAMETERS, e(t.BLOCK_CIPHER_MODE, t.CBC), e(t.PADDING_METHOD, t.PKCS5))
    (enc,) = ok(conn_b.call(on(t.OP_ENCRYPT, uid, cbc, b(t.DATA, b"shared use"))))
    assert enc.find(t.IV_COUNTER_NONCE) is not None


def test_audit_and_listing(kmip: dict[str, Any], conn_a: Raw) -> None:
    (created,) = ok(conn_a.call(create(name="listed")))
    uid = uid_of(created)
    (got,) = ok(conn_a.call(on(t.OP_GET, uid)))
    key = got.find(t.SYMMETRIC_KEY).find(t.KEY_BLOCK).find(t.KEY_VALUE).need(t.KEY_MATERIAL, t.BYTES)  # type: ignore[union-attr]
    listed = {d["name"]: d for d in kmip["a"].list()}
    assert listed[f"kmip-{uid}"]["kmip"] == {"id": uid, "type": "SymmetricKey", "state": "Pre-Active"}
    entries = kmip["d"].admin().audit_tail(limit=1000)
    mine = [(x["action"], x["outcome"]) for x in entries if uid in x["target"]]
    assert ("kmip.create", "ok") in mine and ("kmip.get", "ok") in mine
    text = json.dumps(entries)
    assert key.hex() not in text and base64.b64encode(key).decode() not in text  # no key material in the log
    assert results(conn_a.call(on(t.OP_GET, "no-such")))[0][1] == t.ITEM_NOT_FOUND
    metrics = httpx.get(kmip["srv"].url + "/metrics", verify=str(kmip["d"].data.ca_file)).text
    assert 'strongroom_kmip_items_total{operation="get",result="success"}' in metrics
    assert 'strongroom_kmip_items_total{operation="get",result="item_not_found"}' in metrics


def test_revoked_client_is_refused_at_once(kmip: dict[str, Any], tmp_path: Path) -> None:
    d = kmip["d"]
    c = d.register("soon-revoked")
    files = issue(c, tmp_path / "c")
    conn = Raw(kmip["srv"].kmip, files)
    try:
        ok(conn.call(create()))
        d.admin().set_client_status(c.client_id, "revoke")
        out = results(conn.call(create()))  # the same connection, the next message
        assert out[0][:2] == (t.OPERATION_FAILED, t.AUTHENTICATION_NOT_SUCCESSFUL)
    finally:
        conn.close()
