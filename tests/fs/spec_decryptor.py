"""A decryptor written from docs/FORMAT.md alone, with pyca primitives and nothing of strongroom:
the proof that the spec is complete.  The tests hold it and the product to the same vectors."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import stat
import struct
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESSIV
from cryptography.hazmat.primitives.kdf.argon2 import Argon2id


def unb64u(s: str) -> bytes:
    """Strict (§6): only the canonical encoding of some bytes."""
    if not re.fullmatch(r"[A-Za-z0-9_-]*", s) or len(s) % 4 == 1:
        raise ValueError("not base64url")
    data = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if b64u(data) != s:
        raise ValueError("not canonical base64url")
    return data


def b64u(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def OPEN(key: bytes, aad: bytes, sealed: bytes) -> bytes:  # noqa: N802 - the spec's name
    return AESGCM(key).decrypt(sealed[:12], sealed[12:], aad)


def SUBKEY(key: bytes, purpose: bytes, salt: bytes) -> bytes:  # noqa: N802 - the spec's name
    return hmac.digest(key, b"strongroom/v5/subkey\x00" + purpose + b"\x00" + salt, "sha256")


def OPEN_SALTED(key: bytes, purpose: bytes, aad: bytes, sealed: bytes) -> bytes:  # noqa: N802
    """§1, version 5: salt(16) ‖ SEAL(SUBKEY(key, purpose, salt), aad, p)."""
    return OPEN(SUBKEY(key, purpose, sealed[:16]), aad, sealed[16:])


def open_v(version: int, key: bytes, purpose: bytes, aad: bytes, sealed: bytes) -> bytes:
    return OPEN_SALTED(key, purpose, aad, sealed) if version >= 5 else OPEN(key, aad, sealed)


def source_key_from_passphrase(source: dict[str, Any], passphrase: str) -> bytes:
    kdf = source["kdf"]
    assert kdf["name"] == "argon2id"
    return Argon2id(
        salt=unb64u(kdf["salt"]), length=32, iterations=kdf["iterations"], lanes=kdf["lanes"], memory_cost=kdf["memory_kib"]
    ).derive(passphrase.encode())


def canonical(value: Any) -> bytes:
    """§4's canonical JSON, from its definition in bytes."""
    if isinstance(value, dict):
        return b"{" + b",".join(canonical(k) + b":" + canonical(value[k]) for k in sorted(value)) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(canonical(v) for v in value) + b"]"
    if value is True or value is False or value is None:
        return {True: b"true", False: b"false", None: b"null"}[value]
    if isinstance(value, int):
        return str(value).encode()
    assert isinstance(value, str), "configs hold no fractions"
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
    out = []
    for ch in value:
        if ch in short:
            out.append(short[ch])
        elif 0x20 <= ord(ch) <= 0x7E:
            out.append(ch)
        elif ord(ch) > 0xFFFF:
            hi, lo = divmod(ord(ch) - 0x10000, 0x400)
            out.append(f"\\u{0xD800 + hi:04x}\\u{0xDC00 + lo:04x}")
        else:
            out.append(f"\\u{ord(ch):04x}")
    return ('"' + "".join(out) + '"').encode()


def check_config(config: dict[str, Any]) -> None:
    """§4, before any key work: format, checksum (when present), version, KDF bounds."""
    if config.get("format") != "strongroom-volume":
        raise ValueError("not a volume config")
    if "checksum" in config:
        body = {k: v for k, v in config.items() if k != "checksum"}
        digest = hashlib.sha256(b"strongroom/v1/config-checksum\x00" + canonical(body)).digest()
        if b64u(digest) != config["checksum"]:
            raise ValueError("damaged config")
    if config["version"] not in (1, 2, 3, 4, 5):
        raise ValueError("unknown version")
    floor = 8192 if config["version"] >= 5 else 0
    for source in config["key_sources"]:
        if source["type"] == "passphrase":
            kdf = source["kdf"]
            m, t, p = kdf["memory_kib"], kdf["iterations"], kdf["lanes"]
            if not all(type(x) is int for x in (m, t, p)) or not (
                1 <= p <= 16 and max(8 * p, floor) <= m <= 1 << 20 and 1 <= t <= 16
            ):
                raise ValueError("KDF parameters out of bounds")
            if not 8 <= len(unb64u(kdf["salt"])) <= 64:
                raise ValueError("salt out of bounds")


def unlock(config: dict[str, Any], passphrase: str | None = None, deposit: bytes | None = None) -> dict[str, bytes]:
    """§4: KEK from the first trustee source (``deposit``: its deposit's content) or from the
    passphrase sources, primary first; then every wrapped key; checks params_mac."""
    check_config(config)
    volume_id, v = unb64u(config["volume_id"]), config["version"]
    if deposit is not None:
        source = next(s for s in config["key_sources"] if s["type"] == "trustee")
        kek = open_v(v, deposit, b"kek", b"strongroom/v1/kek\x00" + volume_id + b"trustee", unb64u(source["sealed_kek"]))
    else:
        assert passphrase is not None
        found = [s for s in config["key_sources"] if s["type"] == "passphrase"]
        for source in [s for s in found if s.get("role") == "primary"] + [s for s in found if s.get("role") != "primary"]:
            try:
                kek = open_v(
                    v,
                    source_key_from_passphrase(source, passphrase),
                    b"kek",
                    b"strongroom/v1/kek\x00" + volume_id + b"passphrase",
                    unb64u(source["sealed_kek"]),
                )
                break
            except Exception:  # noqa: BLE001, S112 - try the next source
                continue
        else:
            raise ValueError("wrong passphrase")
    keys = {"kek": kek, "volume_id": volume_id, "version": v}
    assert set(config["wrapped"]) == {"names", "xattr-names", "xattr-values", "rules-mac"} | ({"dir-ids"} if v >= 5 else set())
    for purpose, wrapped in config["wrapped"].items():
        aad = b"strongroom/v1/" + purpose.encode() + b"\x00" + volume_id
        keys[purpose] = open_v(v, kek, purpose.encode(), aad, unb64u(wrapped))
    fields = {k: config[k] for k in ("block_size", "cipher", "format", "long_name_max", "names", "version", "volume_id")}
    if "acl" in config:
        fields["acl"] = config["acl"]
    if v >= 5:
        fields["key_sources"] = [{k: x for k, x in s.items() if k != "sealed_kek"} for s in config["key_sources"]]
    mac = hmac.new(keys["rules-mac"], b"strongroom/v1/params\x00" + canonical(fields), hashlib.sha256).digest()
    if not hmac.compare_digest(mac, unb64u(config["params_mac"])):
        raise ValueError("params_mac")
    return keys


def retired_keks(config: dict[str, Any], keys: dict[str, bytes]) -> list[bytes]:
    """§7: the KEK ring, newest first (empty before any rotation)."""
    if "retired_keks" not in config:
        return []
    aad = b"strongroom/v1/retired-keks\x00" + keys["volume_id"]
    ring = open_v(config["version"], keys["kek"], b"retired-keks", aad, unb64u(config["retired_keks"]))
    assert len(ring) % 32 == 0
    return [ring[i : i + 32] for i in range(0, len(ring), 32)]


FILE, SYMLINK, EXPORT = 1, 2, 3  # §5: the object kinds of a version-5 header


def file_key_of(header: bytes, kek: bytes, volume_id: bytes, kind: int) -> bytes:
    """§5: the header of an object of ``kind`` (0: of a version 1-4 volume, version 1 flags 0)."""
    if header[:4] != b"SRF1":
        raise ValueError("bad magic")
    want = (2, kind) if kind else (1, 0)
    if struct.unpack(">HH", header[4:8]) != want:
        raise ValueError("unsupported file version or another object kind")
    aad = b"strongroom/v1/file\x00" + volume_id + header[:24]
    return OPEN(SUBKEY(kek, b"file", header[8:24]) if kind else kek, aad, header[24:84])


def decrypt_file(lower: bytes, kek: bytes, volume_id: bytes, holes: bool = False, kind: int = 0) -> bytes:
    """§5; ``holes``: version 3, where every block but the last may be a hole (4,124 zero bytes);
    ``kind``: what a version-5 volume's object must be."""
    if not lower:
        return b""
    if len(lower) < 84 + 29 or 0 < (len(lower) - 84) % 4124 <= 28:
        raise ValueError("impossible size")
    file_id = lower[8:24]
    file_key = file_key_of(lower[:84], kek, volume_id, kind)
    out = []
    starts = range(84, len(lower), 4124)
    for i, start in enumerate(starts):
        block = lower[start : start + 4124]
        if holes and i < len(starts) - 1 and block == bytes(4124):
            out.append(bytes(4096))
            continue
        out.append(OPEN(file_key, file_id + struct.pack(">Q", i), block))
    return b"".join(out)


def decrypt_name(lower_name: str, name_key: bytes, diriv: bytes, sidecar: str | None = None, long_name_max: int = 175) -> bytes:
    """§6; ``sidecar`` is the .name file's content for a long name."""
    e = lower_name
    long = lower_name.startswith("strongroom.longname.")
    if long:
        if sidecar is None or lower_name != "strongroom.longname." + b64u(hashlib.sha256(sidecar.encode()).digest()):
            raise ValueError("the long name's sidecar does not hash to it")
        e = sidecar
    if long != (len(e) > long_name_max):
        raise ValueError("not the name's one spelling")
    name = AESSIV(name_key).decrypt(unb64u(e), [b"strongroom/v1/name\x00" + diriv])
    if name in (b"", b".", b"..") or b"/" in name or b"\x00" in name or len(name) > 255:
        raise ValueError("a name no writer stores")
    return name


def derive_tweak(parent_tweak: bytes, lower_name: str, dir_key: bytes | None = None) -> bytes:
    """§6: version 2-4, or keyed by the dir-ids key (version 5)."""
    if dir_key is not None:
        return hmac.digest(dir_key, b"strongroom/v5/tweak\x00" + parent_tweak + lower_name.encode(), "sha256")[:16]
    return hashlib.sha256(b"strongroom/v2/tweak\x00" + parent_tweak + lower_name.encode()).digest()[:16]


def tweak_tag(dir_key: bytes, place: bytes, tweak: bytes, lower_name: str) -> bytes:
    """§6, version 5: a stored tweak's tag for the directory ``lower_name`` in the one whose
    tweak is ``place`` (the root: the volume id and the empty name)."""
    return hmac.digest(dir_key, b"strongroom/v5/diriv\x00" + place + tweak + lower_name.encode(), "sha256")[:16]


def directory_tweak(
    lower_dir: Path, parent_tweak: bytes | None, version: int, keys: dict[str, Any] | None = None, lower_name: str | None = None
) -> bytes:
    """§6: the stored tweak, or (version 2, below the root) the one derived from the parent's;
    version 5 (``keys``): keyed, and a stored one carries its tags."""
    name = lower_dir.name if lower_name is None else lower_name
    dir_key = keys["dir-ids"] if version >= 5 and keys is not None else None
    stored = lower_dir / "strongroom.diriv"
    sizes = (32, 48) if dir_key is not None else (16,)
    try:
        st = stored.lstat()
    except FileNotFoundError:
        if parent_tweak is None or version < 2:
            raise ValueError("a directory without its tweak") from None
        return derive_tweak(parent_tweak, name, dir_key)
    if not stat.S_ISREG(st.st_mode) or st.st_size not in sizes:  # never follow, never block, never read more
        raise ValueError("a stored tweak that is not a regular file of its size")
    fd = os.open(stored, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        raw = os.read(fd, max(sizes) + 1)
    finally:
        os.close(fd)
    if len(raw) not in sizes:
        raise ValueError("a stored tweak of the wrong size")
    tweak = raw[:16]
    if dir_key is not None:
        assert keys is not None
        place, own = (keys["volume_id"], "") if parent_tweak is None else (parent_tweak, name)
        want = tweak_tag(dir_key, place, tweak, own)
        if not any(hmac.compare_digest(raw[i : i + 16], want) for i in range(16, len(raw), 16)):
            raise ValueError("a stored tweak that does not authenticate here")
    return tweak


def read_tree(volume: Path, passphrase: str) -> dict[str, bytes | None]:
    """§3-§6: every plaintext path of a volume -> the file's plaintext (None for a directory,
    b"-> " + target for a symlink, b"special " + its octal type for a FIFO, socket or device)."""
    config = json.loads((volume / "strongroom.volume.json").read_text())
    keys = unlock(config, passphrase)
    v = config["version"]
    kind = (lambda k: k) if v >= 5 else (lambda k: 0)
    out: dict[str, bytes | None] = {}

    def walk(lower: Path, plain: str, parent_tweak: bytes | None) -> None:
        tweak = directory_tweak(lower, parent_tweak, v, keys)
        for entry in sorted(lower.iterdir()):
            n = entry.name
            if n.startswith("strongroom.") and not (n.startswith("strongroom.longname.") and not n.endswith(".name")):
                continue
            sidecar = (lower / (n + ".name")).read_text() if n.startswith("strongroom.longname.") else None
            path = plain + "/" + decrypt_name(n, keys["names"], tweak, sidecar).decode()
            if entry.is_symlink():
                raw = os.readlink(entry)
                out[path] = b"-> " + decrypt_file(unb64u(raw), keys["kek"], keys["volume_id"], kind=kind(SYMLINK))
            elif entry.is_dir():
                out[path] = None
                walk(entry, path, tweak)
            elif entry.is_file():
                out[path] = decrypt_file(entry.read_bytes(), keys["kek"], keys["volume_id"], v >= 3, kind(FILE))
            else:  # a FIFO, socket or device node: its lower entry is the special file itself
                out[path] = b"special " + oct(stat.S_IFMT(entry.lstat().st_mode)).encode()

    walk(volume, "", None)
    return out


def decrypt_xattr(lower_name: str, value: bytes, keys: dict[str, bytes], binding: bytes | None = None) -> tuple[str, bytes]:
    """§6; ``binding`` (version 4): b"file\\0" + file id, b"dir\\0" + tweak, or b"empty"."""
    assert lower_name.startswith("user.sr.")
    name = AESSIV(keys["xattr-names"]).decrypt(unb64u(lower_name[8:]), [b"strongroom/v1/xattr-name"]).decode()
    ad = b"strongroom/v1/xattr-value\x00" + lower_name.encode() + (b"" if binding is None else b"\x00" + binding)
    plain = open_v(keys.get("version", 4), keys["xattr-values"], b"xattr-value", ad, value)
    return "user." + name, plain


def decrypt_standalone(
    data: bytes, passphrase: str | None = None, volume_kek: bytes | None = None, retired: list[bytes] | None = None
) -> bytes:
    """§7: keyed by a passphrase, or (``volume_kek``, then each of ``retired``) by the volume
    whose id the envelope names."""
    if volume_kek is not None:
        for kek in [volume_kek, *(retired or [])]:
            try:
                return _decrypt_standalone(data, None, kek)
            except Exception:  # noqa: BLE001, S112 - the next KEK of the ring
                continue
        raise ValueError("no KEK of the volume opens it")
    return _decrypt_standalone(data, passphrase, None)


def _decrypt_standalone(data: bytes, passphrase: str | None, volume_kek: bytes | None) -> bytes:
    assert data[:4] == b"SRE1"
    (length,) = struct.unpack(">I", data[4:8])
    assert length <= 65536, "envelope too large"
    env = json.loads(data[8 : 8 + length])
    volume_id = unb64u(env["volume_id"])
    source = env["key_source"]
    if source is None:
        assert volume_kek is not None, "keyed by a volume"
        kek = volume_kek
    else:
        assert passphrase is not None
        kek = OPEN(
            source_key_from_passphrase(source, passphrase),
            b"strongroom/v1/kek\x00" + volume_id + b"passphrase",
            unb64u(source["sealed_kek"]),
        )
    body = data[8 + length :]
    file_part, end = body[:-36], body[-36:]
    kind = EXPORT if file_part[4:6] == b"\x00\x02" else 0  # a file made before version 5 has no kind
    plain = decrypt_file(file_part, kek, volume_id, kind=kind) if len(file_part) > 84 else b""
    file_id = file_part[8:24]
    file_key = file_key_of(file_part[:84], kek, volume_id, kind)
    size = struct.unpack(">Q", OPEN(file_key, file_id + b"\xff" * 8, end))[0]
    assert size == len(plain), "cut"
    return plain
