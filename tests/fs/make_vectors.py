"""Regenerates tests/fs/vectors.json with the product code (run by hand, after a format change):
    .venv/bin/python -m tests.fs.make_vectors
The vectors are then fixed: the tests decrypt them with the product and with spec_decryptor."""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

from strongroom.fs import config, content, keys, names, standalone, volume, xattrs

OUT = Path(__file__).with_name("vectors.json")
PASSPHRASE = "correct horse battery staple"


def sparse_file(kek: bytes, volume_id: bytes) -> dict[str, str]:
    """A version-3 file of three blocks whose middle one is a hole (FORMAT.md §5)."""
    header = content.FileHeader.fresh()
    cipher = content.FileCipher(header)
    first, last = b"first block " * 341 + b"abcd", b"the end"
    lower = header.encode(kek, volume_id) + cipher.seal(0, first) + bytes(content.CBLOCK) + cipher.seal(2, last)
    return {"plaintext_hex": (first + bytes(content.BLOCK) + last).hex(), "lower_hex": lower.hex()}


def bound_xattr(xc: xattrs.XattrCipher) -> dict[str, str]:
    """A version-4 attribute value, bound to a regular file's id and to a directory's tweak (§6)."""
    file_id, tweak = os.urandom(16), os.urandom(16)
    lower = xc.lower_name("user.origin")
    return {
        "name": "user.origin",
        "lower_name": lower,
        "value": "bound to one file",
        "file_id_hex": file_id.hex(),
        "file_value_hex": xc.seal_value(lower, b"bound to one file", xattrs.file_binding(file_id)).hex(),
        "dir_tweak_hex": tweak.hex(),
        "dir_value_hex": xc.seal_value(lower, b"bound to one file", xattrs.dir_binding(tweak)).hex(),
        "empty_value_hex": xc.seal_value(lower, b"bound to one file", xattrs.EMPTY).hex(),
    }


def negative_files(lower: bytes, kek: bytes, volume_id: bytes) -> list[dict[str, object]]:
    """Damaged versions of a valid lower file, each with what a reader must answer (§5, §8)."""
    other = content.FileHeader.fresh().encode(kek, volume_id)

    def flip(data: bytes, at: int) -> bytes:
        return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]

    cases: list[tuple[str, bytes, bool, str]] = [
        ("a bit of the magic flipped", flip(lower, 0), False, "bad magic"),
        ("format version 2 in the header", lower[:4] + b"\x00\x02" + lower[6:], False, "unsupported file version"),
        ("a bit of the file id flipped", flip(lower, 8), False, "header does not authenticate"),
        ("a bit of the wrapped file key flipped", flip(lower, 40), False, "header does not authenticate"),
        ("a bit of block 0 flipped", flip(lower, 84 + 500), False, "block 0"),
        ("the header of another file of the volume", other + lower[84:], False, "block 0"),
        ("cut to 100 bytes", lower[:100], False, "impossible size"),
        ("cut to the bare header", lower[:84], False, "impossible size"),
        ("the last block cut to 20 bytes", lower[: 84 + 4124 + 20], False, "impossible size"),
        ("the last block zeroed (version 3: never a hole)", lower[:4208] + bytes(len(lower) - 4208), True, "block 1"),
        ("block 0 zeroed in a version 1 or 2 volume", lower[:84] + bytes(4124) + lower[84 + 4124 :], False, "block 0"),
    ]
    return [{"case": c, "lower_hex": d.hex(), "holes": h, "refusal": r} for c, d, h, r in cases]


_B64U = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _low_bit_set(text: str) -> str:
    """``text`` with an unused low bit of its last character set: decodes to the same bytes."""
    if len(text) % 4 == 0:
        return text + "AB"  # one more byte, and 4 unused bits of which the lowest is set
    return text[:-1] + _B64U[_B64U.index(text[-1]) | 1]


def negative_names(nc: names.NameCipher, diriv: bytes, short: bytes, long_lower: str, sidecar: str) -> list[dict[str, object]]:
    """Lower names a reader must not list (§6), with the sidecar where there is one."""
    lower = nc.lower_name(short, diriv)[0]
    siv = nc._siv
    cases: list[tuple[str, str, str | None]] = [
        ("padded base64url", lower + "=" * (-len(lower) % 4 or 4), None),
        ("base64url with a character outside the alphabet", lower[:-1] + "+", None),
        ("non-canonical: unused low bits set", _low_bit_set(lower), None),
        ("decrypts to '..'", names.b64u(siv.encrypt(b"..", [names.NAME_AD + diriv])), None),
        ("decrypts to a name with a slash", names.b64u(siv.encrypt(b"a/b", [names.NAME_AD + diriv])), None),
        ("encrypted in another directory", nc.lower_name(short, bytes(16))[0], None),
        ("a long name whose sidecar does not hash to it", long_lower, sidecar[:-2] + ("BA" if sidecar.endswith("AA") else "AA")),
    ]
    return [{"case": c, "lower": n, "sidecar": sc} for c, n, sc in cases]


NON_ASCII_PASSPHRASE = "pässwörd ☃ 密码"  # UTF-8 as typed, no normalization (§4)


def more_positives(vk: keys.VolumeKeys, cfg_json: dict, diriv: bytes, nc: names.NameCipher, file_lower: bytes) -> dict:
    """Symlinks, non-ASCII names and passphrases, empty files, hard links, a version-2 config and a
    standalone file keyed by the volume (every value opens with the vectors' keys)."""
    target = "../données/ziel ☃".encode()
    header = content.FileHeader.fresh()
    link = names.b64u(header.encode(vk.kek, vk.volume_id) + content.FileCipher(header).seal(0, target))
    v2 = json.loads(json.dumps(cfg_json))
    v2["version"] = 2
    v2_cfg = config.VolumeConfig.from_json(v2)
    v2["params_mac"] = names.b64u(v2_cfg._mac(vk.rules_mac))
    sa = io.BytesIO()
    standalone.encrypt_stream(io.BytesIO(b"kept with the volume's key\n" * 200), sa, vk.volume_id, vk.kek, None, 1)
    non_ascii = "Grüße, 世界 ☃.txt".encode()
    return {
        "symlink": {"target": target.decode(), "lower_target": link},
        "non_ascii_name": {"plaintext": non_ascii.decode(), "lower": nc.lower_name(non_ascii, diriv)[0]},
        "non_ascii_passphrase": {
            "passphrase": NON_ASCII_PASSPHRASE,
            "source": config.passphrase_source(vk.kek, vk.volume_id, NON_ASCII_PASSPHRASE),
        },
        "empty_file": {"lower_hex": "", "plaintext_hex": ""},
        "hard_link": {
            "note": "one lower inode (the 'file' vector's bytes) under two lower names of the root",
            "names": [{"plaintext": n, "lower": nc.lower_name(n.encode(), diriv)[0]} for n in ("first name", "second name")],
            "lower_hex": file_lower.hex(),
        },
        "config_v2": v2,
        "standalone_volume": {"plaintext": "kept with the volume's key\n" * 200, "encrypted_hex": sa.getvalue().hex()},
    }


def main() -> None:
    os.environ["STRONGROOM_ARGON2_MEMORY_KIB"] = "256"  # cheap parameters, stored in the vector
    os.environ["STRONGROOM_ARGON2_ITERATIONS"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        vol = Path(tmp) / "vol"
        volume.init_volume(vol, PASSPHRASE, recovery_passphrase="recovery words")
        cfg_json = json.loads((vol / config.CONFIG).read_text())
        diriv = (vol / names.DIRIV).read_bytes()
    vk = config.VolumeConfig.from_json(cfg_json).unlock_passphrase(PASSPHRASE)
    plain = bytes(range(256)) * 20 + b"tail"  # 5124 bytes: one full block and a partial one
    header = content.FileHeader.fresh()
    lower = header.encode(vk.kek, vk.volume_id) + content.FileCipher(header).seal(0, plain)
    nc = names.NameCipher(vk.names)
    short = b"hello, world.txt"
    long_plain = ("a-very-long-name-" * 12).encode()[:200]
    long_lower, sidecar = nc.lower_name(long_plain, diriv)
    xc = xattrs.XattrCipher(vk.xattr_names, vk.xattr_values)
    x_lower = xc.lower_name("user.comment")
    x_value = xc.seal_value(x_lower, b"checked by fsck", None)
    sa = io.BytesIO()
    standalone.encrypt_with_passphrase(io.BytesIO(b"standalone plaintext\n" * 300), sa, PASSPHRASE)
    vectors = {
        "passphrase": PASSPHRASE,
        "recovery_passphrase": "recovery words",
        "config": cfg_json,
        "keys_hex": {"kek": vk.kek.hex(), "names": vk.names.hex(), "xattr-names": vk.xattr_names.hex()},
        "root_diriv_hex": diriv.hex(),
        "derived_tweak": {
            "parent_hex": diriv.hex(),
            "lower_name": nc.lower_name(short, diriv)[0],
            "tweak_hex": names.derived_diriv(diriv, nc.lower_name(short, diriv)[0]).hex(),
        },
        "file": {"plaintext_hex": plain.hex(), "lower_hex": lower.hex()},
        "sparse_file": sparse_file(vk.kek, vk.volume_id),
        "xattr_bound": bound_xattr(xc),
        "names": [
            {"plaintext": short.decode(), "lower": nc.lower_name(short, diriv)[0], "sidecar": None},
            {"plaintext": long_plain.decode(), "lower": long_lower, "sidecar": sidecar},
        ],
        "xattr": {"name": "user.comment", "lower_name": x_lower, "value": "checked by fsck", "lower_value_hex": x_value.hex()},
        "standalone": {"plaintext": "standalone plaintext\n" * 300, "encrypted_hex": sa.getvalue().hex()},
        **more_positives(vk, cfg_json, diriv, nc, lower),
        "negative_files": negative_files(lower, vk.kek, vk.volume_id),
        "negative_names": negative_names(nc, diriv, short, long_lower, sidecar or ""),
    }
    OUT.write_text(json.dumps(vectors, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
