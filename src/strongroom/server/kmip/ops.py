"""KMIP's operations, in the writer process: one request message is one action of the group
commit (the client's status checked, each batch item run and audited, committed before the
answer leaves).  A batch item's payload arrives as TTLV bytes and its answer leaves as TTLV
bytes; the worker (listener.py) frames both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strongroom.crypto import aead
from strongroom.server import barrier as barrier_mod
from strongroom.server import messages as m
from strongroom.server import repository as repo
from strongroom.server.audit import AuditWriter
from strongroom.server.ctx import Ctx
from strongroom.server.errors import ApiError, ApprovalRequired, Denied, Gone, NotFound, Refused
from strongroom.server.kmip import attrs as a
from strongroom.server.kmip import cipher, rows
from strongroom.server.kmip import tags as t
from strongroom.server.kmip.lifecycle import PRIVATE, Fail, Lifecycle, shown, target
from strongroom.server.kmip.rows import KmipRow
from strongroom.server.kmip.ttlv import Item, Malformed, b, decode, e, encode, i, s, txt
from strongroom.server.service import Service
from strongroom.server.storage import Tx

VERSIONS = ((2, 0), (1, 4), (1, 3), (1, 2), (1, 1), (1, 0))  # preferred first
VENDOR = "Strongroom"
Result = tuple[int, int, str, bytes]  # (status, reason, message, response payload TTLV)
OBJECT_TAGS = {t.SYMMETRIC_KEY_TYPE: t.SYMMETRIC_KEY, t.SECRET_DATA_OBJECT: t.SECRET_DATA, t.OPAQUE_DATA_OBJECT: t.OPAQUE_OBJECT}


def _reason_of(err: ApiError) -> int:
    if isinstance(err, NotFound):
        return t.ITEM_NOT_FOUND
    if isinstance(err, Denied | Gone):
        return t.PERMISSION_DENIED
    return t.INVALID_FIELD if err.status < 500 else t.GENERAL_FAILURE


class Engine:
    def __init__(self, service: Service) -> None:
        self.service = service
        self.life = Lifecycle(service.deposits, service.clock)
        self.ops: dict[int, Callable[[Ctx, Item, bool], Item]] = {
            t.OP_DISCOVER_VERSIONS: self.discover_versions,
            t.OP_QUERY: self.query,
            t.OP_CREATE: self.create,
            t.OP_REGISTER: self.register,
            t.OP_GET: self.get,
            t.OP_GET_ATTRIBUTES: self.get_attributes,
            t.OP_GET_ATTRIBUTE_LIST: self.get_attribute_list,
            t.OP_ADD_ATTRIBUTE: self.add_attribute,
            t.OP_MODIFY_ATTRIBUTE: self.modify_attribute,
            t.OP_DELETE_ATTRIBUTE: self.delete_attribute,
            t.OP_SET_ATTRIBUTE: self.set_attribute,
            t.OP_ACTIVATE: self.activate,
            t.OP_REVOKE: self.revoke,
            t.OP_DESTROY: self.destroy,
            t.OP_LOCATE: self.locate,
            t.OP_ENCRYPT: self.encrypt,
            t.OP_DECRYPT: self.decrypt,
            t.OP_REKEY: self.rekey,
        }
        self._last: str | None = None  # the ID placeholder: the last identifier a batch item made or used

    def action(self, msg: m.KmipRequest) -> Callable[[Tx, AuditWriter], list[Result]]:
        def run(tx: Tx, aw: AuditWriter) -> list[Result]:
            client = repo.client(tx, msg.client_id)
            if client is None or client.status != "active":
                why = "unknown client" if client is None else f"client is {client.status}"
                aw.append(msg.client_id, "kmip.auth", "kmip", "denied", reason=why)
                return [(t.OPERATION_FAILED, t.AUTHENTICATION_NOT_SUCCESSFUL, f"not authenticated: {why}", b"")]
            ctx, out = Ctx(tx, client, aw), []
            self._last = None
            for op, payload in msg.items:
                result = self.one(ctx, op, payload, msg.major >= 2)
                out.append(result)
                if result[0] != t.SUCCESS and not msg.keep_going:
                    break
            return out

        return run

    def one(self, ctx: Ctx, op: int, payload: bytes, v2: bool) -> Result:
        handler = self.ops.get(op)
        name = f"kmip.op{op}"
        try:
            if handler is None:
                ctx.audit.append(ctx.client.id, name, "kmip", "denied", reason="operation not supported")
                raise Fail(t.OPERATION_NOT_SUPPORTED, f"operation {op} is not supported")
            item = decode(payload) if payload else Item(t.REQUEST_PAYLOAD, t.STRUCTURE, [])
            if item.kind != t.STRUCTURE:
                raise Malformed("a request payload is a structure")
            answer = handler(ctx, item, v2)
            return t.SUCCESS, 0, "", encode(answer)
        except Fail as f:
            return t.OPERATION_FAILED, f.reason, f.message, b""
        except a.AttributeError_ as f:
            return t.OPERATION_FAILED, f.reason, str(f), b""
        except Malformed as f:
            return t.OPERATION_FAILED, t.INVALID_MESSAGE, str(f), b""
        except Refused as r:
            msg = r.error.message
            if isinstance(r.error, ApprovalRequired):
                msg = f"{msg} (approval request {r.error.request_id})"
            return t.OPERATION_FAILED, _reason_of(r.error), msg, b""
        except ApiError as err:
            return t.OPERATION_FAILED, _reason_of(err), err.message, b""
        except barrier_mod.SealedError:
            return t.OPERATION_FAILED, t.GENERAL_FAILURE, "the server is sealed", b""

    # -- helpers ---------------------------------------------------------------------------
    def _uid(self, p: Item) -> str:
        uid = p.get(t.UNIQUE_IDENTIFIER, t.TEXT)
        if uid is None:
            if self._last is None:
                raise Fail(t.INVALID_FIELD, "no Unique Identifier given and none earlier in the batch")
            return self._last
        return str(uid)

    def _find(self, ctx: Ctx, p: Item, op: str, owner_only: bool) -> KmipRow:
        row = self.life.find(ctx, self._uid(p), op, owner_only)
        self._last = row.uid
        return row

    def _ok(self, ctx: Ctx, op: str, row: KmipRow, **detail: Any) -> None:
        ctx.audit.append(ctx.client.id, f"kmip.{op}", target(row), "ok", uid=row.uid, **detail)

    def _denied(self, ctx: Ctx, op: str, row: KmipRow, f: Fail) -> Fail:
        ctx.audit.append(ctx.client.id, f"kmip.{op}", target(row), "denied", uid=row.uid, reason=f.message)
        return f

    def _given(self, p: Item) -> list[a.Attr]:
        given = a.from_request(p)
        self.life.check_client_attrs(given)
        return given

    # -- version and server information ------------------------------------------------------
    def discover_versions(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        asked = [
            (v.get(t.PROTOCOL_VERSION_MAJOR, t.INTEGER), v.get(t.PROTOCOL_VERSION_MINOR, t.INTEGER))
            for v in p.all(t.PROTOCOL_VERSION)
        ]
        ours = [v for v in VERSIONS if not asked or v in asked]
        ctx.audit.append(ctx.client.id, "kmip.discover_versions", "kmip", "ok")
        return s(t.RESPONSE_PAYLOAD, *(version_item(*v) for v in ours))

    def query(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        asked = {q.value for q in p.all(t.QUERY_FUNCTION)}
        out: list[Item | None] = []
        if t.QUERY_OPERATIONS in asked:
            out += [e(t.OPERATION, op) for op in sorted(self.ops)]
        if t.QUERY_OBJECTS in asked:
            out += [e(t.OBJECT_TYPE, ot) for ot in sorted(OBJECT_TAGS)]
        if t.QUERY_SERVER_INFORMATION in asked:
            out += [txt(t.VENDOR_IDENTIFICATION, VENDOR), s(t.SERVER_INFORMATION)]
        ctx.audit.append(ctx.client.id, "kmip.query", "kmip", "ok", functions=sorted(asked))
        return s(t.RESPONSE_PAYLOAD, *out)

    # -- making objects --------------------------------------------------------------------
    def create(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        kind = p.need(t.OBJECT_TYPE, t.ENUM)
        if kind != t.SYMMETRIC_KEY_TYPE:
            raise Fail(t.INVALID_FIELD, "Create makes symmetric keys only")
        given = self._given(p)
        algorithm, length = a.first(given, "Cryptographic Algorithm"), a.first(given, "Cryptographic Length")
        if algorithm is None or algorithm.value != t.AES or length is None:
            raise Fail(t.INVALID_FIELD, "Create needs Cryptographic Algorithm AES and a Cryptographic Length")
        row = self.life.make(ctx, "create", kind, self.life.new_key(length.value), given, [])
        self._last = row.uid
        return s(t.RESPONSE_PAYLOAD, e(t.OBJECT_TYPE, kind), txt(t.UNIQUE_IDENTIFIER, row.uid))

    def register(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        kind = p.need(t.OBJECT_TYPE, t.ENUM)
        tag = OBJECT_TAGS.get(kind)
        obj = p.find(tag) if tag is not None else None
        if tag is None or obj is None or obj.kind != t.STRUCTURE:
            raise Fail(t.INVALID_FIELD, "Register takes a SymmetricKey, SecretData or OpaqueObject, with its object")
        given = self._given(p)
        private: list[a.Attr] = []
        if kind == t.OPAQUE_DATA_OBJECT:
            material = obj.need(t.OPAQUE_DATA_VALUE, t.BYTES)
            private.append(a.value_of("_opaque_type", e(t.OPAQUE_DATA_TYPE, obj.need(t.OPAQUE_DATA_TYPE, t.ENUM)), private=True))
        else:
            material, fmt, algorithm, length = key_block(obj.find(t.KEY_BLOCK))
            private.append(a.value_of("_format", e(t.KEY_FORMAT_TYPE, fmt), private=True))
            if kind == t.SECRET_DATA_OBJECT:
                private.append(
                    a.value_of("_secret_type", e(t.SECRET_DATA_TYPE, obj.need(t.SECRET_DATA_TYPE, t.ENUM)), private=True)
                )
            for name, item in (("Cryptographic Algorithm", algorithm), ("Cryptographic Length", length)):
                if item is not None and a.first(given, name) is None:
                    given.append(a.value_of(name, item))
            if kind == t.SYMMETRIC_KEY_TYPE:
                have = a.first(given, "Cryptographic Length")
                if have is not None and have.value != len(material) * 8:
                    raise Fail(t.INVALID_FIELD, "Cryptographic Length does not match the key material")
        if not material or len(material) > cipher_limit():
            raise Fail(t.INVALID_FIELD, f"the object's value must be 1 to {cipher_limit()} bytes")
        row = self.life.make(ctx, "register", kind, material, given, private)
        self._last = row.uid
        return s(t.RESPONSE_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, row.uid))

    def rekey(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        row = self._find(ctx, p, "rekey", owner_only=True)
        offset = p.get(t.OFFSET, t.INTERVAL)
        try:
            new = self.life.rekey(ctx, row, offset, self._given(p))
        except Fail as f:
            raise self._denied(ctx, "rekey", row, f) from None
        self._last = new.uid
        return s(t.RESPONSE_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, new.uid))

    # -- reading ---------------------------------------------------------------------------
    def get(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        row = self._find(ctx, p, "get", owner_only=False)
        if p.find(t.KEY_WRAPPING_SPECIFICATION) is not None:
            raise self._denied(ctx, "get", row, Fail(t.FEATURE_NOT_SUPPORTED, "key wrapping is not supported"))
        asked = p.get(t.KEY_FORMAT_TYPE, t.ENUM)
        fmt_item = a.first(row.attrs, "_format")
        fmt = fmt_item.value if fmt_item is not None else t.RAW
        if row.object_type == t.SYMMETRIC_KEY_TYPE and asked not in (None, t.RAW, t.TRANSPARENT_SYMMETRIC_KEY):
            raise self._denied(
                ctx, "get", row, Fail(t.KEY_FORMAT_TYPE_NOT_SUPPORTED, "symmetric keys are given Raw or Transparent")
            )
        if row.object_type == t.SECRET_DATA_OBJECT and asked not in (None, t.RAW, t.OPAQUE):
            raise self._denied(ctx, "get", row, Fail(t.KEY_FORMAT_TYPE_NOT_SUPPORTED, "secret data is given Raw or Opaque"))
        data = self.service.deposits.retrieve(ctx, row.deposit, rows.VALUE_VERSION, "kmip.get", target(row))
        return s(
            t.RESPONSE_PAYLOAD,
            e(t.OBJECT_TYPE, row.object_type),
            txt(t.UNIQUE_IDENTIFIER, row.uid),
            self._object(row, data, asked or fmt),
        )

    def _object(self, row: KmipRow, data: bytes, fmt: int) -> Item:
        if row.object_type == t.OPAQUE_DATA_OBJECT:
            kind = a.first(row.attrs, "_opaque_type")
            return s(t.OPAQUE_OBJECT, e(t.OPAQUE_DATA_TYPE, kind.value if kind else 0x80000000), b(t.OPAQUE_DATA_VALUE, data))
        material = s(t.KEY_MATERIAL, b(t.KEY, data)) if fmt == t.TRANSPARENT_SYMMETRIC_KEY else b(t.KEY_MATERIAL, data)
        algorithm, length = a.first(row.attrs, "Cryptographic Algorithm"), a.first(row.attrs, "Cryptographic Length")
        block = s(
            t.KEY_BLOCK,
            e(t.KEY_FORMAT_TYPE, fmt),
            s(t.KEY_VALUE, material),
            e(t.CRYPTOGRAPHIC_ALGORITHM, algorithm.value) if algorithm is not None else None,
            i(t.CRYPTOGRAPHIC_LENGTH, length.value) if length is not None else None,
        )
        if row.object_type == t.SECRET_DATA_OBJECT:
            kind = a.first(row.attrs, "_secret_type")
            return s(t.SECRET_DATA, e(t.SECRET_DATA_TYPE, kind.value if kind else 1), block)
        return s(t.SYMMETRIC_KEY, block)

    def get_attributes(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        row = self._find(ctx, p, "get_attributes", owner_only=False)
        asked = [a.name_reference(x, v2) for x in p.all(t.ATTRIBUTE_NAME) + p.all(t.ATTRIBUTE_REFERENCE)]
        have = [x for x in shown(row.attrs) if not asked or x[0] in asked]
        self._ok(ctx, "get_attributes", row)
        uid = txt(t.UNIQUE_IDENTIFIER, row.uid)
        if v2:
            return s(t.RESPONSE_PAYLOAD, uid, s(t.ATTRIBUTES, *a.render(have, True)))
        return s(t.RESPONSE_PAYLOAD, uid, *a.render(have, False))

    def get_attribute_list(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        row = self._find(ctx, p, "get_attribute_list", owner_only=False)
        names = list(dict.fromkeys(n for n, _ in shown(row.attrs) if not v2 or n in a.SPECS))
        self._ok(ctx, "get_attribute_list", row)
        return s(t.RESPONSE_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, row.uid), *(a.reference(n, v2) for n in names))

    def locate(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        wanted = a.from_request(p)
        limit = min(p.get(t.MAXIMUM_ITEMS, t.INTEGER) or 1000, 1000)
        skip = max(p.get(t.OFFSET_ITEMS, t.INTEGER) or 0, 0)
        found = [r.uid for r in rows.visible(ctx.tx, ctx.client.id) if all(_matches(r.attrs, w) for w in wanted)]
        ctx.audit.append(ctx.client.id, "kmip.locate", "kmip", "ok", found=len(found), criteria=len(wanted))
        page = found[skip : skip + limit]
        located = i(t.LOCATED_ITEMS, len(found)) if v2 else None
        return s(t.RESPONSE_PAYLOAD, located, *(txt(t.UNIQUE_IDENTIFIER, u) for u in page))

    # -- changing --------------------------------------------------------------------------
    def _change(self, ctx: Ctx, p: Item, op: str, act: Callable[[KmipRow], Item | None]) -> Item:
        row = self._find(ctx, p, op, owner_only=True)
        try:
            extra = act(row)
        except Fail as f:
            raise self._denied(ctx, op, row, f) from None
        self._ok(ctx, op, row, state=row.state)
        return s(t.RESPONSE_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, row.uid), extra)

    def add_attribute(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        given = p.find(t.ATTRIBUTE) or p.find(t.NEW_ATTRIBUTE)
        if given is None:
            raise Fail(t.INVALID_FIELD, "AddAttribute needs an Attribute")
        attr = a.from_v1(given) if given.tag == t.ATTRIBUTE else a.from_v2(_only(given))

        def act(row: KmipRow) -> Item | None:
            index = self.life.add(ctx, row, attr)
            return None if v2 else a.render([attr], False)[0] if not index else _indexed(attr, index)

        return self._change(ctx, p, "add_attribute", act)

    def set_attribute(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        attr = a.from_v2(_only(p.find(t.NEW_ATTRIBUTE)))
        return self._change(ctx, p, "set_attribute", lambda row: self.life.set_value(ctx, row, attr))

    def modify_attribute(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        v1 = p.find(t.ATTRIBUTE)
        if v1 is not None:
            attr, index = a.from_v1(v1), v1.get(t.ATTRIBUTE_INDEX, t.INTEGER, 0)

            def act1(row: KmipRow) -> Item | None:
                self.life.modify(ctx, row, attr, index)
                return _indexed(attr, index)

            return self._change(ctx, p, "modify_attribute", act1)
        new = a.from_v2(_only(p.find(t.NEW_ATTRIBUTE)))
        cur = p.find(t.CURRENT_ATTRIBUTE)
        current = a.from_v2(_only(cur))[1] if cur is not None else None
        return self._change(ctx, p, "modify_attribute", lambda row: self.life.modify(ctx, row, new, 0, current))

    def delete_attribute(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        cur = p.find(t.CURRENT_ATTRIBUTE)
        if cur is not None:
            name, value = a.from_v2(_only(cur))
            return self._change(ctx, p, "delete_attribute", lambda row: _none(self.life.delete(ctx, row, name, 0, value)))
        ref = p.find(t.ATTRIBUTE_NAME) or p.find(t.ATTRIBUTE_REFERENCE)
        if ref is None:
            raise Fail(t.INVALID_FIELD, "DeleteAttribute needs the attribute's name")
        name, index = a.name_reference(ref, v2), p.get(t.ATTRIBUTE_INDEX, t.INTEGER, 0)

        def act(row: KmipRow) -> Item | None:
            gone = self.life.delete(ctx, row, name, index)
            return None if v2 else _indexed(gone, index)

        return self._change(ctx, p, "delete_attribute", act)

    def activate(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        return self._change(ctx, p, "activate", lambda row: self.life.activate(ctx, row))

    def revoke(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        reason = p.find(t.REVOCATION_REASON)
        if reason is None or reason.kind != t.STRUCTURE:
            raise Fail(t.INVALID_FIELD, "Revoke needs a Revocation Reason")
        code = reason.need(t.REVOCATION_REASON_CODE, t.ENUM)
        text = reason.get(t.REVOCATION_MESSAGE, t.TEXT)
        occurred = p.get(t.COMPROMISE_OCCURRENCE_DATE, t.DATETIME)
        return self._change(ctx, p, "revoke", lambda row: self.life.revoke(ctx, row, code, text, occurred))

    def destroy(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        return self._change(ctx, p, "destroy", lambda row: self.life.destroy(ctx, row))

    # -- using keys ------------------------------------------------------------------------
    def _key(self, ctx: Ctx, p: Item, op: str, bit: int) -> tuple[KmipRow, bytes, cipher.Params]:
        row = self._find(ctx, p, op, owner_only=False)
        try:
            if row.object_type != t.SYMMETRIC_KEY_TYPE:
                raise Fail(t.INVALID_FIELD, "only symmetric keys encrypt and decrypt")
            if row.state != t.ACTIVE:
                raise Fail(t.PERMISSION_DENIED, "the key is not Active")
            mask = a.first(row.attrs, "Cryptographic Usage Mask")
            if mask is not None and not mask.value & bit:
                raise Fail(t.PERMISSION_DENIED, f"the key's usage mask does not allow {op}")
            params = cipher.Params(p.find(t.CRYPTOGRAPHIC_PARAMETERS) or a.first(row.attrs, "Cryptographic Parameters"))
            key = self.service.deposits.barrier.read_version(ctx.tx, row.deposit.id, row.deposit.owner_id, rows.VALUE_VERSION)
        except Fail as f:
            raise self._denied(ctx, op, row, f) from None
        except aead.DecryptionError:
            raise self._denied(ctx, op, row, Fail(t.GENERAL_FAILURE, "the key failed its integrity check")) from None
        if p.find(t.CORRELATION_VALUE) is not None or p.find(t.INIT_INDICATOR) is not None:
            raise self._denied(ctx, op, row, Fail(t.FEATURE_NOT_SUPPORTED, "streaming Encrypt/Decrypt is not supported"))
        return row, key, params

    def encrypt(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        row, key, params = self._key(ctx, p, "encrypt", t.USAGE_ENCRYPT)
        data = p.need(t.DATA, t.BYTES)
        try:
            out, made, tag = cipher.encrypt(
                key, params, data, p.get(t.IV_COUNTER_NONCE, t.BYTES), p.get(t.AUTHENTICATED_ENCRYPTION_ADDITIONAL_DATA, t.BYTES)
            )
        except Fail as f:
            raise self._denied(ctx, "encrypt", row, f) from None
        self._ok(ctx, "encrypt", row, bytes=len(data))
        return s(
            t.RESPONSE_PAYLOAD,
            txt(t.UNIQUE_IDENTIFIER, row.uid),
            b(t.DATA, out),
            b(t.IV_COUNTER_NONCE, made) if made is not None else None,
            b(t.AUTHENTICATED_ENCRYPTION_TAG, tag) if tag is not None else None,
        )

    def decrypt(self, ctx: Ctx, p: Item, v2: bool) -> Item:
        row, key, params = self._key(ctx, p, "decrypt", t.USAGE_DECRYPT)
        data = p.need(t.DATA, t.BYTES)
        aad, tag = p.get(t.AUTHENTICATED_ENCRYPTION_ADDITIONAL_DATA, t.BYTES), p.get(t.AUTHENTICATED_ENCRYPTION_TAG, t.BYTES)
        try:
            out = cipher.decrypt(key, params, data, p.get(t.IV_COUNTER_NONCE, t.BYTES), aad, tag)
        except Fail as f:
            raise self._denied(ctx, "decrypt", row, f) from None
        self._ok(ctx, "decrypt", row, bytes=len(data))
        return s(t.RESPONSE_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, row.uid), b(t.DATA, out))


def cipher_limit() -> int:
    return 64 * 1024


def version_item(major: int, minor: int) -> Item:
    return s(t.PROTOCOL_VERSION, i(t.PROTOCOL_VERSION_MAJOR, major), i(t.PROTOCOL_VERSION_MINOR, minor))


def key_block(block: Item | None) -> tuple[bytes, int, Item | None, Item | None]:
    """(material, key format, algorithm item, length item) of a Key Block in the clear."""
    if block is None or block.kind != t.STRUCTURE:
        raise Fail(t.INVALID_FIELD, "the object needs a Key Block")
    if block.find(t.KEY_WRAPPING_DATA) is not None:
        raise Fail(t.FEATURE_NOT_SUPPORTED, "wrapped keys are not supported")
    fmt = block.need(t.KEY_FORMAT_TYPE, t.ENUM)
    value = block.find(t.KEY_VALUE)
    material: Any = None
    if value is not None and value.kind == t.STRUCTURE:
        material = value.find(t.KEY_MATERIAL)
        if material is not None and material.kind == t.STRUCTURE:  # Transparent Symmetric Key
            material = material.find(t.KEY)
    if material is None or material.kind != t.BYTES:
        raise Fail(t.INVALID_FIELD, "the Key Value needs its Key Material as bytes")
    if fmt not in (t.RAW, t.OPAQUE, t.TRANSPARENT_SYMMETRIC_KEY):
        raise Fail(t.KEY_FORMAT_TYPE_NOT_SUPPORTED, "keys are registered Raw, Opaque or Transparent")
    fmt = t.RAW if fmt == t.TRANSPARENT_SYMMETRIC_KEY else fmt
    return material.value, fmt, block.find(t.CRYPTOGRAPHIC_ALGORITHM), block.find(t.CRYPTOGRAPHIC_LENGTH)


def _only(item: Item | None) -> Item:
    """The one attribute item a 2.0 New/Current Attribute holds."""
    if item is None or item.kind != t.STRUCTURE or len(item.value) != 1:
        raise Fail(t.INVALID_FIELD, "a New or Current Attribute holds exactly one attribute")
    return item.value[0]  # type: ignore[no-any-return]


def _indexed(attr: a.Attr, index: int) -> Item:
    parts = [txt(t.ATTRIBUTE_NAME, attr[0]), i(t.ATTRIBUTE_INDEX, index) if index else None, a.item_of(attr, t.ATTRIBUTE_VALUE)]
    return s(t.ATTRIBUTE, *parts)


def _none(_: object) -> None:
    return None


def _matches(have: list[a.Attr], want: a.Attr) -> bool:
    name, value = want
    if name.startswith(PRIVATE):
        return False
    if name == "Name":  # by its text: clients differ in the name type they send
        text = decode(value).find(t.NAME_VALUE)
        return any(
            n == "Name" and (x := decode(v).find(t.NAME_VALUE)) is not None and text is not None and x.value == text.value
            for n, v in have
        )
    return any(n == name and v == value for n, v in have)
