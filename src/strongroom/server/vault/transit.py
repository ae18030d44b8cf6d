"""Transit at ``transit/``: named keys per client (aes256-gcm96, chacha20-poly1305, ed25519),
versions sealed by the barrier, used through a per-request keyring (crypto/transit.py) that can
encrypt, decrypt, sign and MAC but not give its material out.  No key is ever exportable.

Ciphertexts, signatures and HMACs are Vault's ``vault:v<N>:<base64>``."""

from __future__ import annotations

import base64
import binascii
import hmac as hmac_mod
import os
import re
from collections.abc import Callable
from typing import Any

from strongroom.crypto import aead
from strongroom.crypto import transit as tc
from strongroom.server import numbers, vault_rows
from strongroom.server.barrier import Barrier
from strongroom.server.errors import IntegrityFailure, Refused
from strongroom.server.service import MAX_ENTROPY, Service
from strongroom.server.vault import durations
from strongroom.server.vault.call import Call
from strongroom.server.vault.errors import Invalid, Missing
from strongroom.server.vault.tokens import iso
from strongroom.server.vault_rows import TransitKeyRow

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_BATCH = 4096
_CIPHERTEXT = numbers.ascii_pattern(r"^vault:v(\d{1,10}):(.*)$", re.S)


def _b64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise Invalid(f"{what} must be base64")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise Invalid(f"failed to base64-decode {what}") from None


def _opt_b64(item: dict[str, Any], name: str) -> bytes | None:
    value = item.get(name)
    return None if value in (None, "") else _b64(value, name)


def wire(version: int, blob: bytes) -> str:
    return f"vault:v{version}:{base64.b64encode(blob).decode()}"


def unwire(text: object, what: str = "ciphertext") -> tuple[int, bytes]:
    if not isinstance(text, str) or not text:
        raise Invalid(f"missing {what} to decrypt" if what == "ciphertext" else f"missing {what}")
    m = _CIPHERTEXT.match(text)
    if m is None:
        raise Invalid(f"invalid {what}: no prefix")
    try:
        blob = base64.b64decode(m.group(2), validate=True)
    except (binascii.Error, ValueError):
        raise Invalid(f"invalid {what}: could not decode base64") from None
    return int(m.group(1)), blob


def _int(value: object, what: str, default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, str) and numbers.is_digits(value) and len(value) <= 10:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 2**31 - 1:
        raise Invalid(f"{what} must be a non-negative integer")
    return value


def _bool(value: object, what: str, default: bool = False) -> bool:
    if value is None:
        return default
    if isinstance(value, str) and value in ("true", "false"):
        return value == "true"
    if not isinstance(value, bool):
        raise Invalid(f"{what} must be true or false")
    return value


def _items(body: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The batch's items, or the body itself as the one item; and whether it was a batch."""
    batch = body.get("batch_input")
    if batch is None:
        return [body], False
    if not isinstance(batch, list) or not all(isinstance(i, dict) for i in batch):
        raise Invalid("batch_input must be a list of objects")
    if not batch:
        raise Invalid("missing batch input to process")
    if len(batch) > MAX_BATCH:
        raise Invalid(f"batch_input holds over {MAX_BATCH} items")
    return batch, True


class Transit:
    def __init__(self, service: Service) -> None:
        self.service = service

    @property
    def barrier(self) -> Barrier:
        return self.service.barrier

    # -- keys ----------------------------------------------------------------------------------
    def _find(self, c: Call, name: str, version: int | None = None) -> TransitKeyRow | None:
        """The caller's key (rotated first if its period is due), reading ``version`` of it (the
        latest when None) in the same statement for ``_ring``."""
        if not NAME_RE.match(name):
            raise Invalid("invalid key name: use letters, digits, '.', '_' and '-', at most 128 characters")
        found = self.barrier.find_transit_key(c.ctx.tx, c.ctx.client.id, name, version)
        key = found[0] if found is not None else None
        if found is not None and found[1] is not None:
            c.memo["transit_version"] = (found[0].id, found[1])
        if key is not None and key.auto_rotate_period and c.service.clock() - key.rotated >= key.auto_rotate_period:
            key = self._rotate(c, key)  # due: rotated at first use, as if the schedule had run
        return key

    def _key(self, c: Call, name: str, version: int | None = None) -> TransitKeyRow:
        key = self._find(c, name, version)
        if key is None:
            c.ctx.audit.append(c.ctx.client.id, "vault.transit", c.path, "denied", reason="no such key")
            raise Refused(Invalid("encryption key not found"))
        return key

    def _create(self, c: Call, name: str, body: dict[str, Any]) -> TransitKeyRow:
        kind = body.get("type", tc.AES) or tc.AES
        if kind not in tc.TYPES:
            raise Invalid(f"unknown key type {kind}" if isinstance(kind, str) else "type must be a string")
        for never in ("exportable", "allow_plaintext_backup"):
            if _bool(body.get(never), never):
                raise Invalid(f"{never} is not supported: transit key material never leaves Strongroom's barrier")
        if _bool(body.get("convergent_encryption"), "convergent_encryption"):
            raise Invalid("convergent_encryption is not supported")
        derived = _bool(body.get("derived"), "derived")
        period = durations.seconds(body.get("auto_rotate_period", 0), "auto_rotate_period")
        if period and period < 3600:
            raise Invalid("auto rotate period must be 0 to disable or at least an hour")
        now = c.service.clock()
        key_id = vault_rows.insert_transit_key(c.ctx.tx, c.ctx.client.id, name, kind, derived, period, now)
        self.barrier.new_transit_version(c.ctx.tx, key_id, c.ctx.client.id, 1, kind, now)
        c.ctx.audit.append(c.ctx.client.id, "vault.transit.create", c.path, "ok", type=kind, derived=derived)
        key = vault_rows.transit_key(c.ctx.tx, c.ctx.client.id, name)
        assert key is not None
        return key

    def _rotate(self, c: Call, key: TransitKeyRow) -> TransitKeyRow:
        now = c.service.clock()
        version = key.latest_version + 1
        self.barrier.new_transit_version(c.ctx.tx, key.id, key.owner_id, version, key.type, now)
        vault_rows.set_transit_latest(c.ctx.tx, key.id, version, now)
        c.ctx.audit.append(c.ctx.client.id, "vault.transit.rotate", f"transit/keys/{key.name}", "ok", version=version)
        fresh = vault_rows.transit_key(c.ctx.tx, key.owner_id, key.name)
        assert fresh is not None
        return fresh

    def _describe(self, c: Call, key: TransitKeyRow) -> dict[str, Any]:
        times = vault_rows.transit_version_times(c.ctx.tx, key.id)
        live = sorted(v for v in times if v >= key.min_decryption_version)
        keys: dict[str, Any]
        if key.type == tc.ED25519:
            ring = self._ring(c, key, live)
            keys = {}
            for v in live:
                public = ring.public_key(v)
                keys[str(v)] = {
                    "certificate_chain": "",
                    "creation_time": iso(times[v]),
                    "name": "ed25519",
                    "public_key": base64.b64encode(public).decode() if public is not None else "",
                }
        else:
            keys = {str(v): int(times[v]) for v in live}
        out = {
            "allow_plaintext_backup": False,
            "auto_rotate_period": key.auto_rotate_period,
            "deletion_allowed": bool(key.deletion_allowed),
            "derived": bool(key.derived),
            "exportable": False,
            "imported_key": False,
            "keys": keys,
            "latest_version": key.latest_version,
            "min_available_version": 0,
            "min_decryption_version": key.min_decryption_version,
            "min_encryption_version": key.min_encryption_version,
            "name": key.name,
            "soft_deleted": False,
            "supports_decryption": key.type != tc.ED25519,
            "supports_derivation": True,
            "supports_encryption": key.type != tc.ED25519,
            "supports_signing": key.type == tc.ED25519,
            "type": key.type,
        }
        if key.derived:
            out["kdf"] = "hkdf_sha256"
            out["convergent_encryption"] = False
        return out

    def _ring(self, c: Call, key: TransitKeyRow, versions: list[int]) -> tc.Keyring:
        versions = [v for v in versions if key.min_decryption_version <= v <= key.latest_version]
        read = c.memo.get("transit_version")
        rows = [read[1]] if read is not None and read[0] == key.id and versions == [read[1][0]] else None
        try:
            return self.barrier.transit_keyring(c.ctx.tx, key.id, key.owner_id, key.type, bool(key.derived), versions, rows)
        except aead.DecryptionError:
            c.ctx.audit.append(c.ctx.client.id, "vault.transit", c.path, "error", reason="key failed authentication")
            raise Refused(IntegrityFailure("transit key failed its integrity check; the operator has been told")) from None

    def _encrypt_version(self, key: TransitKeyRow, asked: object) -> int:
        v = _int(asked, "key_version") or key.latest_version
        if v > key.latest_version or v < key.min_decryption_version:
            raise Invalid("no such key version")
        if key.min_encryption_version and v < key.min_encryption_version:
            raise Invalid("requested version for encryption is less than the minimum encryption key version")
        return v

    def _live_version(self, key: TransitKeyRow, asked: object) -> int:
        """The version to MAC or sign with: the one asked for, or the latest; never one retired."""
        v = _int(asked, "key_version") or key.latest_version
        if v > key.latest_version or v < key.min_decryption_version:
            raise Invalid("no such key version")
        return v

    def _decrypt_version(self, key: TransitKeyRow, v: int) -> None:
        if v > key.latest_version:
            raise Invalid("invalid ciphertext: version is too new")
        if v < key.min_decryption_version or v == 0:
            raise Invalid("ciphertext or signature version is disallowed by policy (too old)")

    # -- routes: keys --------------------------------------------------------------------------
    def write_key(self, c: Call) -> dict[str, Any]:
        name = c.params["name"]
        key = self._find(c, name)
        c.require("update" if key is not None else "create")
        if key is None:
            key = self._create(c, name, c.body)
        return self._describe(c, key)

    def read_key(self, c: Call) -> dict[str, Any]:
        key = self._find(c, c.params["name"])
        if key is None:
            c.ctx.audit.append(c.ctx.client.id, "vault.transit.read", c.path, "denied", reason="no such key")
            raise Refused(Missing())
        c.ctx.audit.append(c.ctx.client.id, "vault.transit.read", c.path, "ok")
        return self._describe(c, key)

    def list_keys(self, c: Call) -> dict[str, Any]:
        names = vault_rows.transit_key_names(c.ctx.tx, c.ctx.client.id)
        c.ctx.audit.append(c.ctx.client.id, "vault.transit.list", c.path, "ok" if names else "denied")
        if not names:
            raise Refused(Missing())
        return {"keys": names}

    def delete_key(self, c: Call) -> None:
        key = self._key(c, c.params["name"])
        if not key.deletion_allowed:
            c.ctx.audit.append(c.ctx.client.id, "vault.transit.delete", c.path, "denied", reason="deletion not allowed")
            raise Refused(Invalid(f"error deleting policy {key.name}: deletion is not allowed for this key"))
        self.barrier.destroy_transit_key(c.ctx.tx, key.id)
        c.ctx.audit.append(c.ctx.client.id, "vault.transit.delete", c.path, "ok")

    def config(self, c: Call) -> dict[str, Any]:
        key = self._key(c, c.params["name"])
        b = c.body
        for never in ("exportable", "allow_plaintext_backup"):
            if _bool(b.get(never), never):
                raise Invalid(f"{never} is not supported: transit key material never leaves Strongroom's barrier")
        min_dec = _int(b.get("min_decryption_version"), "min_decryption_version", key.min_decryption_version)
        min_enc = _int(b.get("min_encryption_version"), "min_encryption_version", key.min_encryption_version)
        if min_dec > key.latest_version:
            raise Invalid("cannot set min decryption version to a value greater than the latest version")
        if min_enc > key.latest_version:
            raise Invalid("cannot set min encryption version to a value greater than the latest version")
        if min_enc and min_dec > min_enc:
            raise Invalid("min decryption version should not be less then min available version")
        min_dec = max(min_dec, 1)
        deletion = _bool(b.get("deletion_allowed"), "deletion_allowed", bool(key.deletion_allowed))
        period = key.auto_rotate_period
        if "auto_rotate_period" in b:
            period = durations.seconds(b["auto_rotate_period"], "auto_rotate_period")
            if period and period < 3600:
                raise Invalid("auto rotate period must be 0 to disable or at least an hour")
        vault_rows.set_transit_config(c.ctx.tx, key.id, min_dec, min_enc, deletion, period)
        c.ctx.audit.append(c.ctx.client.id, "vault.transit.config", c.path, "ok")
        fresh = vault_rows.transit_key(c.ctx.tx, key.owner_id, key.name)
        assert fresh is not None
        return self._describe(c, fresh)

    def rotate(self, c: Call) -> dict[str, Any]:
        key = self._rotate(c, self._key(c, c.params["name"]))
        return self._describe(c, key)

    # -- routes: use ---------------------------------------------------------------------------
    def _batch(self, c: Call, items: list[dict[str, Any]], batch: bool, one: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
        """Each item through ``one``; a batch answers every item (errors in place) with 400 if
        any failed, as Vault does; a single request answers its error."""
        if not batch:
            try:
                return one(items[0])
            except tc.TransitError as e:
                raise Invalid(str(e)) from None
        results = []
        failed = 0
        for item in items:
            try:
                out = one(item)
            except (Invalid, tc.TransitError) as e:
                failed += 1
                out = {"error": str(e.message if isinstance(e, Invalid) else e)}
            results.append({**out, "reference": item.get("reference", "") if isinstance(item.get("reference", ""), str) else ""})
        if failed:
            c.status = 400
        return {"batch_results": results}

    def _done(self, c: Call, op: str, key: TransitKeyRow, items: int, **detail: Any) -> None:
        c.ctx.audit.append(c.ctx.client.id, f"vault.transit.{op}", c.path, "ok", items=items, **detail)

    def encrypt(self, c: Call) -> Any:
        name = c.params["name"]
        key = self._find(c, name, _int(c.body.get("key_version"), "key_version") or None)
        c.require("update" if key is not None else "create")
        if key is None:  # Vault's encrypt makes the key it is asked to use
            key = self._create(c, name, {"type": c.body.get("type", tc.AES)})
        items, batch = _items(c.body)
        if key.type == tc.ED25519:
            raise Invalid(f"message encryption not supported for key type {key.type}")
        v = self._encrypt_version(key, c.body.get("key_version"))
        ring = self._ring(c, key, [v])

        def one(item: dict[str, Any]) -> dict[str, Any]:
            if "plaintext" not in item:
                raise Invalid("missing plaintext to encrypt")
            iv = self._encrypt_version(key, item["key_version"]) if "key_version" in item else v
            if iv != v:
                raise Invalid("key_version differs within a batch; give it once for the request")
            plaintext = _b64(item.get("plaintext"), "plaintext")
            blob = ring.encrypt(v, plaintext, _opt_b64(item, "context"), _opt_b64(item, "associated_data"))
            return {"ciphertext": wire(v, blob), "key_version": v}

        out = self._batch(c, items, batch, one)
        self._done(c, "encrypt", key, len(items), version=v)
        return out

    def decrypt(self, c: Call) -> Any:
        key = self._key(c, c.params["name"], _single_version(c.body, "ciphertext"))
        if key.type == tc.ED25519:
            raise Invalid(f"message decryption not supported for key type {key.type}")
        items, batch = _items(c.body)
        ring = self._ring(c, key, _versions(items, "ciphertext"))

        def one(item: dict[str, Any]) -> dict[str, Any]:
            v, blob = unwire(item.get("ciphertext"))
            self._decrypt_version(key, v)
            plaintext = ring.decrypt(v, blob, _opt_b64(item, "context"), _opt_b64(item, "associated_data"))
            return {"plaintext": base64.b64encode(plaintext).decode()}

        out = self._batch(c, items, batch, one)
        self._done(c, "decrypt", key, len(items))
        return out

    def rewrap(self, c: Call) -> Any:
        key = self._key(c, c.params["name"])
        if key.type == tc.ED25519:
            raise Invalid(f"message encryption not supported for key type {key.type}")
        items, batch = _items(c.body)
        v = self._encrypt_version(key, c.body.get("key_version"))
        ring = self._ring(c, key, sorted({v, *_versions(items, "ciphertext")}))

        def one(item: dict[str, Any]) -> dict[str, Any]:
            old, blob = unwire(item.get("ciphertext"))
            self._decrypt_version(key, old)
            context, aad = _opt_b64(item, "context"), _opt_b64(item, "associated_data")
            plaintext = ring.decrypt(old, blob, context, aad)
            return {"ciphertext": wire(v, ring.encrypt(v, plaintext, context, aad)), "key_version": v}

        out = self._batch(c, items, batch, one)
        self._done(c, "rewrap", key, len(items), version=v)
        return out

    def datakey(self, c: Call) -> Any:
        kind = c.params["kind"]
        if kind not in ("plaintext", "wrapped"):
            raise Invalid(f'invalid type "{kind}": use plaintext or wrapped')
        key = self._key(c, c.params["name"])
        if key.type == tc.ED25519:
            raise Invalid(f"message encryption not supported for key type {key.type}")
        bits = _int(c.body.get("bits"), "bits", 256)
        if bits not in (128, 256, 512):
            raise Invalid(f"invalid bits {bits}: use 128, 256 or 512")
        v = self._encrypt_version(key, c.body.get("key_version"))
        ring = self._ring(c, key, [v])
        fresh = os.urandom(bits // 8)
        blob = _as_invalid(lambda _: ring.encrypt(v, fresh, _opt_b64(c.body, "context"), None))({})
        out = {"ciphertext": wire(v, blob), "key_version": v}
        if kind == "plaintext":
            out["plaintext"] = base64.b64encode(fresh).decode()
        self._done(c, "datakey", key, 1, version=v, kind=kind)
        return out

    def random(self, c: Call) -> Any:
        raw = c.params.get("bytes", c.body.get("bytes", 32))
        if raw in ("platform", "all", "seal") and "source" not in c.params:  # random/{source}
            c.params["source"], raw = str(raw), c.body.get("bytes", 32)
        n = _int(raw, "bytes", 32)
        if not 1 <= n <= MAX_ENTROPY:
            raise Invalid(f"bytes must be between 1 and {MAX_ENTROPY}")
        source = c.params.get("source", c.body.get("source", "platform"))
        if source not in ("platform", "all", "seal"):
            raise Invalid(f'unsupported entropy source "{source}"')
        fmt = c.params.get("format") or c.body.get("format", "base64")
        if fmt not in ("base64", "hex"):
            raise Invalid(f'unsupported encoding format "{fmt}"; must be "base64" or "hex"')
        data = c.service.entropy_mixer.random(n)
        c.ctx.audit.append(c.ctx.client.id, "vault.transit.random", c.path, "ok", bytes=n)
        return {"random_bytes": base64.b64encode(data).decode() if fmt == "base64" else data.hex()}

    def _algorithm(self, c: Call, default: str = "sha2-256") -> str:
        alg = c.params.get("algorithm") or c.body.get("algorithm") or default
        if not isinstance(alg, str) or alg not in tc.HMAC_ALGORITHMS:
            raise Invalid(f"unsupported algorithm {str(alg)[:40]}")
        return alg

    def hmac(self, c: Call) -> Any:
        key = self._key(c, c.params["name"])
        alg = self._algorithm(c)
        items, batch = _items(c.body)
        v = self._live_version(key, c.body.get("key_version"))
        ring = self._ring(c, key, [v])

        def one(item: dict[str, Any]) -> dict[str, Any]:
            if "input" not in item:
                raise Invalid("missing input for HMAC")
            return {"hmac": wire(v, ring.hmac(v, alg, _b64(item.get("input"), "input")))}

        out = self._batch(c, items, batch, one)
        self._done(c, "hmac", key, len(items), version=v)
        return out

    def sign(self, c: Call) -> Any:
        key = self._key(c, c.params["name"])
        if key.type != tc.ED25519:
            raise Invalid(f"key type {key.type} does not support signing")
        items, batch = _items(c.body)
        v = self._live_version(key, c.body.get("key_version"))
        ring = self._ring(c, key, [v])

        def one(item: dict[str, Any]) -> dict[str, Any]:
            if "input" not in item:
                raise Invalid("missing input to sign")
            sig = ring.sign(v, _b64(item.get("input"), "input"), _opt_b64(item, "context"))
            return {"signature": wire(v, sig), "key_version": v}

        out = self._batch(c, items, batch, one)
        self._done(c, "sign", key, len(items), version=v)
        return out

    def verify(self, c: Call) -> Any:
        key = self._key(c, c.params["name"])
        items, batch = _items(c.body)
        ring = self._ring(c, key, sorted({*_versions(items, "signature"), *_versions(items, "hmac")}))
        alg = self._algorithm(c)

        def one(item: dict[str, Any]) -> dict[str, Any]:
            data = _b64(item.get("input"), "input")
            if item.get("hmac") is not None:
                v, mac = unwire(item.get("hmac"), "hmac")
                self._decrypt_version(key, v)
                return {"valid": hmac_mod.compare_digest(ring.hmac(v, alg, data), mac)}
            if key.type != tc.ED25519:
                if "signature" not in item:
                    raise Invalid("missing hmac to verify")
                raise Invalid(f"key type {key.type} does not support verification")
            v, sig = unwire(item.get("signature"), "signature")
            self._decrypt_version(key, v)
            return {"valid": ring.verify(v, data, sig, _opt_b64(item, "context"))}

        out = self._batch(c, items, batch, one)
        self._done(c, "verify", key, len(items))
        return out


def _single_version(body: dict[str, Any], field: str) -> int | None:
    """The key version a single (not batch) request's ``field`` names, if it is well formed."""
    m = _CIPHERTEXT.match(body[field]) if "batch_input" not in body and isinstance(body.get(field), str) else None
    return int(m.group(1)) if m is not None and len(m.group(1)) <= 9 else None


def _versions(items: list[dict[str, Any]], field: str) -> list[int]:
    """The key versions the well-formed ``field`` values of a batch name (the rest fail later)."""
    out = set()
    for item in items:
        m = _CIPHERTEXT.match(item[field]) if isinstance(item.get(field), str) else None
        if m is not None:
            out.add(int(m.group(1)))
    return sorted(out)


def _as_invalid(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The keyring's refusals answered as Vault's 400s."""

    def run(item: Any) -> Any:
        try:
            return fn(item)
        except tc.TransitError as e:
            raise Invalid(str(e)) from None

    return run


_S: dict[str, Any] = {"type": "string"}
_I: dict[str, Any] = {"type": "integer"}
_B: dict[str, Any] = {"type": "boolean"}


def _with_batch(fields: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """A body's JSON Schema: its fields, and batch_input items of ``item``'s fields."""
    batch = {"type": "array", "items": {"type": "object", "properties": {**item, "reference": _S}}}
    return {**fields, **item, "batch_input": batch}


def register(add: Any, service: Service) -> None:
    t = Transit(service)
    key_body = {"type": _S, "derived": _B, "exportable": _B, "convergent_encryption": _B, "auto_rotate_period": _S}
    config_body = {
        "min_decryption_version": _I,
        "min_encryption_version": _I,
        "deletion_allowed": _B,
        "auto_rotate_period": _S,
        "exportable": _B,
    }
    enc = _with_batch({"key_version": _I, "type": _S}, {"plaintext": _S, "context": _S, "associated_data": _S})
    dec = _with_batch({}, {"ciphertext": _S, "context": _S, "associated_data": _S})
    rewrap = _with_batch({"key_version": _I}, {"ciphertext": _S, "context": _S})
    mac = _with_batch({"key_version": _I, "algorithm": _S}, {"input": _S})
    sign = _with_batch({"key_version": _I}, {"input": _S, "context": _S})
    verify = _with_batch({"algorithm": _S}, {"input": _S, "hmac": _S, "signature": _S, "context": _S})
    random = {"bytes": _I, "format": _S, "source": _S}
    add("POST", "transit/keys/{name}", t.write_key, None, body=key_body)
    add("GET", "transit/keys/{name}", t.read_key, "read")
    add("DELETE", "transit/keys/{name}", t.delete_key, "delete")
    add("LIST", "transit/keys", t.list_keys, "list")
    add("POST", "transit/keys/{name}/config", t.config, "update", body=config_body)
    add("POST", "transit/keys/{name}/rotate", t.rotate, "update")
    add("POST", "transit/encrypt/{name}", t.encrypt, None, body=enc)
    add("POST", "transit/decrypt/{name}", t.decrypt, "update", body=dec)
    add("POST", "transit/rewrap/{name}", t.rewrap, "update", body=rewrap)
    add("POST", "transit/datakey/{kind}/{name}", t.datakey, "update", body={"bits": _I, "context": _S, "key_version": _I})
    add("POST", "transit/random", t.random, "update", body=random)
    add("POST", "transit/random/{bytes}", t.random, "update", body=random)
    add("POST", "transit/random/{source}/{bytes}", t.random, "update", body=random)
    add("POST", "transit/hmac/{name}", t.hmac, "update", body=mac)
    add("POST", "transit/hmac/{name}/{algorithm}", t.hmac, "update", body=mac)
    add("POST", "transit/sign/{name}", t.sign, "update", body=sign)
    add("POST", "transit/sign/{name}/{algorithm}", t.sign, "update", body=sign)
    add("POST", "transit/verify/{name}", t.verify, "update", body=verify)
    add("POST", "transit/verify/{name}/{algorithm}", t.verify, "update", body=verify)
