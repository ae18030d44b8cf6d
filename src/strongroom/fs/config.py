"""The volume config, strongroom.volume.json (docs/FORMAT.md §4), and its key sources.

A key source yields a 32-byte source key that opens the source's sealed copy of the KEK:
Argon2id of a passphrase, or the content of a deposit on the Strongroom key server.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strongroom.crypto.kdf import MEMORY_KIB_FLOOR, Argon2Params, KdfParamsError, passphrase_key
from strongroom.fs import durable, keys, sidecar
from strongroom.fs.names import LONG_NAME_MAX, b64u, unb64u

CONFIG = "strongroom.volume.json"
CONFIG_MAX = 1 << 20  # bytes: a config is a few KiB
FORMAT = "strongroom-volume"
VERSION = 5  # what new volumes are written as
# version 1: every directory stores its tweak (FORMAT.md §6); before version 3, files have no
# holes (§5); before version 4, extended attributes are bound to their name only (§6); before
# version 5, seals are not salted, headers carry no kind, tweaks are neither keyed nor MAC'd and
# the key sources' fields are outside params_mac
READABLE = (1, 2, 3, 4, 5)


class ConfigError(Exception):
    """The config is missing, unreadable, tampered with, or no key source opens it."""


def kek_aad(volume_id: bytes, source_type: str) -> bytes:
    return keys.PREFIX + b"kek\x00" + volume_id + source_type.encode()


def seal_kek(source_key: bytes, volume_id: bytes, source_type: str, kek: bytes, version: int) -> str:
    """A key source's ``sealed_kek`` (salted from version 5, FORMAT.md §4)."""
    aad = kek_aad(volume_id, source_type)
    return b64u(keys.seal_salted(source_key, "kek", aad, kek) if version >= keys.V5 else keys.seal(source_key, aad, kek))


def open_kek(source_key: bytes, volume_id: bytes, source: dict[str, Any], version: int) -> bytes:
    aad, sealed = kek_aad(volume_id, source["type"]), unb64u(source["sealed_kek"])
    if version >= keys.V5:
        return keys.open_salted(source_key, "kek", aad, sealed, "the volume key")
    return keys.open_sealed(source_key, aad, sealed, "the volume key")


def passphrase_source(
    kek: bytes, volume_id: bytes, passphrase: str, role: str = "primary", version: int = VERSION
) -> dict[str, Any]:
    params = Argon2Params.fresh()
    source_key = passphrase_key(passphrase, params)
    return {
        "type": "passphrase",
        "role": role,
        "kdf": {
            "name": "argon2id",
            "salt": b64u(params.salt),
            "memory_kib": params.memory_kib,
            "iterations": params.iterations,
            "lanes": params.lanes,
        },
        "sealed_kek": seal_kek(source_key, volume_id, "passphrase", kek, version),
    }


def passphrase_source_key(source: dict[str, Any], passphrase: str, version: int = 4) -> bytes:
    """The source key of a passphrase key source: Argon2id with the parameters stored in it
    (from format version 5, with at least MEMORY_KIB_FLOOR of memory)."""
    try:
        kdf = source["kdf"]
        params = Argon2Params(unb64u(kdf["salt"]), kdf["memory_kib"], kdf["iterations"], kdf["lanes"])
        if version >= keys.V5 and params.memory_kib < MEMORY_KIB_FLOOR:
            raise KdfParamsError(f"Argon2id memory must be at least {MEMORY_KIB_FLOOR} KiB in a version-5 volume")
    except KdfParamsError as e:  # before any work: a tampered config cannot ask for 1 TiB or 10^9 passes
        raise ConfigError(f"passphrase key source refused: {e}") from None
    except (KeyError, TypeError, ValueError):
        raise ConfigError("passphrase key source is corrupt") from None
    return passphrase_key(passphrase, params)


def trustee_source(
    kek: bytes, volume_id: bytes, servers: list[str], owner: str, deposit: str, source_key: bytes, version: int = VERSION
) -> dict[str, Any]:
    """A source whose key is the deposit ``deposit`` of ``owner`` (the caller stores source_key there)."""
    return {
        "type": "trustee",
        "role": "primary",
        "servers": servers,
        "owner": owner,
        "deposit": deposit,
        "sealed_kek": seal_kek(source_key, volume_id, "trustee", kek, version),
    }


RETIRED = "retired_keks"
RETIRED_PURPOSE = "retired-keks"
CHECKSUM_AD = b"strongroom/v1/config-checksum\x00"


def tang_source(
    kek: bytes,
    volume_id: bytes,
    threshold: int,
    servers: list[dict[str, Any]],
    source_key: bytes,
    role: str,
    version: int = VERSION,
) -> dict[str, Any]:
    """A source whose key ``threshold`` of the Tang ``servers`` give back (fs/tang.py)."""
    return {
        "type": "tang",
        "role": role,
        "threshold": threshold,
        "servers": servers,
        "sealed_kek": seal_kek(source_key, volume_id, "tang", kek, version),
    }


def _checksum(d: dict[str, Any]) -> str:
    """SHA-256 over every other field (FORMAT.md §4): tells a damaged config (a changed salt,
    wrapped key, id or KDF parameter) from a wrong passphrase, which otherwise look alike."""
    body = {k: v for k, v in d.items() if k != "checksum"}
    return b64u(hashlib.sha256(CHECKSUM_AD + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).digest())


ACL = "acl"  # {"serial": n}: the volume has access rules, at serial n or later (docs/ACL.md)


def _canonical_params(d: dict[str, Any]) -> bytes:
    keep = {k: d[k] for k in ("block_size", "cipher", "format", "long_name_max", "names", "version", "volume_id")}
    if ACL in d:  # once present, removing it breaks the MAC: rules cannot be made to disappear
        keep[ACL] = d[ACL]
    if d["version"] >= keys.V5:  # a source's role, servers, owner and deposit: only its sealed KEK may change
        keep["key_sources"] = [{k: v for k, v in s.items() if k != "sealed_kek"} for s in d["key_sources"]]
    return json.dumps(keep, sort_keys=True, separators=(",", ":")).encode()


@dataclass
class VolumeConfig:
    volume_id: bytes
    key_sources: list[dict[str, Any]]
    wrapped: dict[str, bytes]
    params_mac: bytes = b""
    long_name_max: int = LONG_NAME_MAX
    extra: dict[str, Any] = field(default_factory=dict)
    version: int = VERSION

    @property
    def derived_tweaks(self) -> bool:
        """Whether directories made on this volume derive their tweak instead of storing one."""
        return self.version >= 2

    @property
    def holes(self) -> bool:
        """Whether a file's blocks other than its last may be holes (all-zero, never written)."""
        return self.version >= 3

    @property
    def bound_xattrs(self) -> bool:
        """Whether extended attribute values are bound to their file (its id, or its tweak)."""
        return self.version >= 4

    # -- creating and storing ------------------------------------------------------------
    @classmethod
    def new(cls, vk: keys.VolumeKeys, sources: list[dict[str, Any]]) -> VolumeConfig:
        cfg = cls(vk.volume_id, sources, vk.wrapped(), version=vk.version)
        cfg.params_mac = cfg._mac(vk.rules_mac)
        return cfg

    def to_json(self) -> dict[str, Any]:
        body = {
            "format": FORMAT,
            "version": self.version,
            "volume_id": b64u(self.volume_id),
            "cipher": "AES-256-GCM",
            "block_size": 4096,
            "names": "AES-256-SIV",
            "long_name_max": self.long_name_max,
            "key_sources": self.key_sources,
            "wrapped": {k: b64u(v) for k, v in self.wrapped.items()},
            "params_mac": b64u(self.params_mac),
            **self.extra,
        }
        body["checksum"] = _checksum(body)
        return body

    def _mac(self, rules_mac_key: bytes) -> bytes:
        return hmac.new(rules_mac_key, keys.PREFIX + b"params\x00" + _canonical_params(self.to_json()), hashlib.sha256).digest()

    def save(self, volume: Path) -> None:
        """Replace the config atomically and durably."""
        durable.replace_file(volume / CONFIG, (json.dumps(self.to_json(), indent=2) + "\n").encode())

    @classmethod
    def load(cls, volume: Path) -> VolumeConfig:
        path = volume / CONFIG
        try:
            data = sidecar.read_bounded(path, CONFIG_MAX)
        except sidecar.UnsafeFile as e:  # a FIFO would block, a symlink could point anywhere
            raise ConfigError(f"{path} {e.why}: refused") from None
        except OSError as e:
            raise ConfigError(f"{path} is unreadable: {e.strerror}") from None
        if data is None:
            raise ConfigError(f"{volume} is not a Strongroom volume (no {CONFIG})")
        try:
            raw = json.loads(data)
        except ValueError as e:
            raise ConfigError(f"{path} is unreadable: {type(e).__name__}") from None
        return cls.from_json(raw, str(path))

    @classmethod
    def from_json(cls, raw: Any, where: str = "config") -> VolumeConfig:
        try:
            if raw["format"] != FORMAT:
                raise ConfigError(f"{where} is not a Strongroom volume config")
            if "checksum" in raw and not hmac.compare_digest(str(raw["checksum"]), _checksum(raw)):
                raise ConfigError(
                    f"{where} is damaged: its checksum does not match its contents (a salt, key, id or "
                    "parameter changed); restore it from a backup"
                )
            if raw["version"] not in READABLE:
                versions = ", ".join(map(str, READABLE[:-1])) + f" and {READABLE[-1]}"
                raise ConfigError(f"{where} has format version {raw['version']}; this Strongroom reads versions {versions}")
            if raw["cipher"] != "AES-256-GCM" or raw["block_size"] != 4096 or raw["names"] != "AES-256-SIV":
                raise ConfigError(f"{where} names parameters this Strongroom does not support")
            sources = list(raw["key_sources"])
            kinds = ("passphrase", "trustee", "tang")
            if not sources or not all(isinstance(s, dict) and s.get("type") in kinds for s in sources):
                raise ConfigError(f"{where} has no usable key source")
            known = {
                "format",
                "version",
                "volume_id",
                "cipher",
                "block_size",
                "names",
                "long_name_max",
                "key_sources",
                "wrapped",
                "params_mac",
                "checksum",
            }
            return cls(
                volume_id=unb64u(raw["volume_id"]),
                key_sources=sources,
                wrapped={k: unb64u(v) for k, v in dict(raw["wrapped"]).items()},
                params_mac=unb64u(raw["params_mac"]),
                long_name_max=int(raw["long_name_max"]),
                version=int(raw["version"]),
                extra={k: v for k, v in raw.items() if k not in known},
            )
        except ConfigError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"{where} is corrupt ({type(e).__name__}: {e})") from None

    # -- unlocking ------------------------------------------------------------------------
    def sources(self, kind: str) -> list[dict[str, Any]]:
        return [s for s in self.key_sources if s.get("type") == kind]

    def unlock_with_source_key(self, source: dict[str, Any], source_key: bytes) -> keys.VolumeKeys:
        try:
            kek = open_kek(source_key, self.volume_id, source, self.version)
        except keys.WrongKey:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"key source is corrupt ({type(e).__name__})") from None
        return self.unlock_with_kek(kek)

    def unlock_with_kek(self, kek: bytes) -> keys.VolumeKeys:
        try:
            vk = keys.VolumeKeys.unwrapped(self.volume_id, kek, self.wrapped, self.version)
        except keys.WrongKey as e:
            raise ConfigError(f"the config's wrapped keys do not open: {e}") from None
        if not hmac.compare_digest(self._mac(vk.rules_mac), self.params_mac):
            raise ConfigError("the config's parameters were changed (params_mac does not match)")
        return vk

    # -- access rules (docs/ACL.md) --------------------------------------------------------
    def verified_acl_floor(self, rules_mac_key: bytes) -> int | None:
        """The lowest serial the volume's rules may have, or None for a volume that never had
        rules; ConfigError when the parameters' MAC (which covers this record) does not verify."""
        if not hmac.compare_digest(self._mac(rules_mac_key), self.params_mac):
            raise ConfigError("the config's parameters were changed (params_mac does not match)")
        record = self.extra.get(ACL)
        if record is None:
            return None
        try:
            return int(record["serial"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError("the config's access-rules record is corrupt") from None

    def raise_acl_floor(self, serial: int, rules_mac_key: bytes) -> None:
        self.verified_acl_floor(rules_mac_key)
        self.extra[ACL] = {"serial": serial}
        self.params_mac = self._mac(rules_mac_key)

    # -- retired KEKs (FORMAT.md §2): standalone files made before a rotation ------------------
    def retired_keks(self, kek: bytes) -> list[bytes]:
        """The KEKs this volume had before its rotations, newest first, opened with the current
        ``kek``: standalone files (§7) made with the volume's key stay readable."""
        sealed = self.extra.get(RETIRED)
        if sealed is None:
            return []
        try:
            ring = keys.unwrap(kek, RETIRED_PURPOSE, self.volume_id, unb64u(sealed), salted=self.version >= keys.V5)
        except (keys.WrongKey, ValueError) as e:
            raise ConfigError(f"the config's retired volume keys do not open: {e}") from None
        if len(ring) % 32:
            raise ConfigError("the config's retired volume keys have the wrong size")
        return [ring[i : i + 32] for i in range(0, len(ring), 32)]

    def retire(self, old_kek: bytes, new_kek: bytes) -> None:
        """Record ``old_kek`` (and the ones before it) under ``new_kek``; the config must still
        hold the keys wrapped under ``old_kek`` when this is called."""
        ring = b"".join([old_kek, *self.retired_keks(old_kek)])
        self.extra[RETIRED] = b64u(keys.wrap(new_kek, RETIRED_PURPOSE, self.volume_id, ring, salted=self.version >= keys.V5))

    def unlock_passphrase(self, passphrase: str) -> keys.VolumeKeys:
        """Try each passphrase source (primary, then recovery)."""
        found = self.sources("passphrase")
        if not found:
            raise ConfigError("this volume has no passphrase key source")
        for source in sorted(found, key=lambda s: s.get("role") != "primary"):
            try:
                return self.unlock_with_source_key(source, passphrase_source_key(source, passphrase, self.version))
            except keys.WrongKey:
                continue
        raise ConfigError("wrong passphrase")

    def unlock_tang(self) -> keys.VolumeKeys:
        """From the volume's Tang servers (ConfigError naming each server's failure)."""
        from strongroom.fs import tang

        found = self.sources("tang")
        if not found:
            raise ConfigError("this volume has no Tang key source")
        try:
            return self.unlock_with_source_key(found[0], tang.recover(found[0], self.volume_id))
        except tang.TangFailure as e:
            raise ConfigError(f"Tang: {e}") from None
        except keys.WrongKey:
            raise ConfigError("the Tang servers' key does not open this volume") from None

    def unlock_trustee(self, fetch: Callable[[dict[str, Any]], bytes]) -> keys.VolumeKeys:
        """``fetch(source)`` returns the deposit's content (the client's errors pass through)."""
        found = self.sources("trustee")
        if not found:
            raise ConfigError("this volume has no key-server key source")
        source = found[0]
        try:
            return self.unlock_with_source_key(source, fetch(source))
        except keys.WrongKey:
            raise ConfigError("the key server's deposit does not open this volume") from None
