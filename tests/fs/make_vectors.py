"""Regenerates tests/fs/vectors.json with the product code (run by hand, after a format change):
    .venv/bin/python -m tests.fs.make_vectors
The vectors are then fixed: the tests decrypt them with the product and with spec_decryptor."""

from __future__ import annotations

import io
import json
import os
import struct
import tempfile
from collections.abc import Callable
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
    opening = header.encode(kek, volume_id) + bytes(content.CBLOCK) + cipher.seal(1, last)  # as a write at 4 KiB makes it
    return {
        "plaintext_hex": (first + bytes(content.BLOCK) + last).hex(),
        "lower_hex": lower.hex(),
        "hole_at_block_0": {"plaintext_hex": (bytes(content.BLOCK) + last).hex(), "lower_hex": opening.hex()},
    }


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
        ("header flags not 0", lower[:6] + b"\x00\x01" + lower[8:], False, "unsupported file version"),
        ("a bit of the file id flipped", flip(lower, 8), False, "header does not authenticate"),
        ("a bit of the wrapped file key flipped", flip(lower, 40), False, "header does not authenticate"),
        ("a bit of block 0 flipped", flip(lower, 84 + 500), False, "block 0"),
        ("the header of another file of the volume", other + lower[84:], False, "block 0"),
        ("cut to 100 bytes", lower[:100], False, "impossible size"),
        ("cut to the bare header", lower[:84], False, "impossible size"),
        ("the last block cut to 20 bytes", lower[: 84 + 4124 + 20], False, "impossible size"),
        ("the last block zeroed (version 3: never a hole)", lower[:4208] + bytes(len(lower) - 4208), True, "block 1"),
        ("block 0 zeroed in a version 1 or 2 volume", lower[:84] + bytes(4124) + lower[84 + 4124 :], False, "block 0"),
        ("a hole at block 0 of a one-block file (the last block: never a hole)", lower[:84] + bytes(4124), True, "block 0"),
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
        ("a short name written in the long form", names.long_name(lower), lower),
        ("a long name written in the short form", sidecar, None),
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
            "source": config.passphrase_source(vk.kek, vk.volume_id, NON_ASCII_PASSPHRASE, version=4),
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


def _resealed(cfg: dict, vk: keys.VolumeKeys, **changes: object) -> dict:
    """``cfg`` with ``changes``, its params_mac made again with the volume's key and, from version
    3 on, its checksum: a config a writer of that version could have written."""
    out = json.loads(json.dumps(cfg))
    out.update(changes)
    out.pop("checksum", None)
    out["params_mac"] = names.b64u(config.VolumeConfig.from_json(out)._mac(vk.rules_mac))
    if out["version"] >= 3:
        out["checksum"] = config._checksum(out)
    return out


def configs_by_version(vk: keys.VolumeKeys, v1: dict) -> dict[str, object]:
    """The vectors' volume as each version writes its config (§4), one with access rules, and one
    rotated (a KEK ring holding the old KEK, and a standalone file made before the rotation, §7)."""
    out: dict[str, object] = {f"v{v}": _resealed(v1, vk, version=v) for v in (1, 2, 3, 4)}
    out["v4_acl"] = _resealed(v1, vk, version=4, acl={"serial": 3})
    new_kek = os.urandom(32)
    before = io.BytesIO()
    standalone.encrypt_stream(io.BytesIO(b"made before the rotation\n" * 50), before, vk.volume_id, vk.kek, None, 1)
    rotated = config.VolumeConfig.from_json(_resealed(v1, vk, version=4))
    rotated.retire(vk.kek, new_kek)
    moved = vk.rewrapped(new_kek)
    rotated.wrapped = moved.wrapped()
    rotated.key_sources = [config.passphrase_source(new_kek, vk.volume_id, PASSPHRASE, version=4)]
    rotated.params_mac = rotated._mac(vk.rules_mac)
    out["v4_rotated"] = {
        "config": rotated.to_json(),
        "kek_hex": new_kek.hex(),
        "retired_keks_hex": [vk.kek.hex()],
        "standalone_before_hex": before.getvalue().hex(),
        "standalone_before_plaintext": "made before the rotation\n" * 50,
    }
    source_key = os.urandom(32)
    trustee = config.trustee_source(vk.kek, vk.volume_id, ["https://keys.example:8443"], "host-7f3a", "vol-kek", source_key, 4)
    out["v4_trustee"] = {
        "config": _resealed(v1, vk, version=4, key_sources=[trustee]),
        "deposit_hex": source_key.hex(),
        "note": "the deposit's content is the source key; OPEN the trustee sealed_kek with it (§4)",
    }
    return out


def edited(base: dict, edit: Callable[[dict], object], checksum: bool = True) -> dict:
    """A copy of the config ``base`` changed by ``edit``, its checksum made again (as anyone can)."""
    out = json.loads(json.dumps(base))
    edit(out)
    if checksum:
        out.pop("checksum")
        out["checksum"] = config._checksum(out)
    return out


def negative_configs(vk: keys.VolumeKeys, v1: dict) -> list[dict[str, object]]:
    """Configs (and a passphrase) a reader must refuse, each with the product's refusal (§4)."""
    v4 = _resealed(v1, vk, version=4)

    salt_changed = edited(v4, lambda c: c["key_sources"][0]["kdf"].update(salt=names.b64u(os.urandom(16))), checksum=False)
    huge = edited(v4, lambda c: c["key_sources"][0]["kdf"].update(memory_kib=(1 << 20) + 1))
    lowered = edited(v4, lambda c: c.update(long_name_max=100))
    swapped = edited(v4, lambda c: c["wrapped"].update(names=c["wrapped"]["xattr-names"]))
    acl = edited(_resealed(v1, vk, version=4, acl={"serial": 3}), lambda c: c.pop("acl"))
    later = edited(v4, lambda c: c.update(version=6))
    cases = [
        ("a salt changed (checksum not recomputed)", salt_changed, PASSPHRASE, "is damaged"),
        ("the wrong passphrase", v4, "correct horse battery stapler", "wrong passphrase"),
        ("KDF memory above 1 GiB (checksum recomputed)", huge, PASSPHRASE, "refused"),
        ("long_name_max lowered (checksum recomputed)", lowered, PASSPHRASE, "parameters were changed"),
        ("the access-rules record removed (checksum recomputed)", acl, PASSPHRASE, "parameters were changed"),
        ("a wrapped key moved to another purpose (checksum recomputed)", swapped, PASSPHRASE, "do not open"),
        ("a version this reader does not know", later, PASSPHRASE, "format version 6"),
    ]
    return [{"case": c, "config": d, "passphrase": pw, "refusal": r} for c, d, pw, r in cases]


def negative_xattrs(xc: xattrs.XattrCipher) -> list[dict[str, object]]:
    """Version-4 attribute values and names a reader must refuse (§6): each value is read with the
    binding of the entry it is found on."""
    lower = xc.lower_name("user.origin")
    own, other = os.urandom(16), os.urandom(16)
    sealed = xc.seal_value(lower, b"bound to one file", xattrs.file_binding(own))
    flipped = sealed[:20] + bytes([sealed[20] ^ 1]) + sealed[21:]
    renamed = xc.lower_name("user.other")
    own_binding = xattrs.file_binding(own)  # the value's own binding: only the name is wrong
    cases = [
        ("moved to another file", lower, xattrs.file_binding(other), sealed),
        ("a bit of the value flipped", lower, xattrs.file_binding(own), flipped),
        ("read on an empty file (rebound to empty)", lower, xattrs.EMPTY, sealed),
        ("read on a directory", lower, xattrs.dir_binding(own), sealed),
        ("moved to another attribute name of the same file", renamed, xattrs.file_binding(own), sealed),
        ("a name in non-canonical base64url", xattrs.PREFIX + _low_bit_set(lower[len(xattrs.PREFIX) :]), own_binding, sealed),
    ]
    return [{"case": c, "lower_name": n, "binding_hex": b.hex(), "value_hex": v.hex()} for c, n, b, v in cases]


def negative_symlinks(vk: keys.VolumeKeys) -> list[dict[str, str]]:
    """Lower symlink targets a reader answers EIO for (§5)."""
    header = content.FileHeader.fresh()
    good_blocks = content.FileCipher(header).seal(0, b"target")
    good = names.b64u(header.encode(vk.kek, vk.volume_id) + good_blocks)
    swapped_char = good[:120] + ("B" if good[120] == "A" else "A") + good[121:]
    cases = [
        ("one character of the target changed", swapped_char),
        ("padded base64url", good + "=" * (-len(good) % 4 or 4)),
        ("non-canonical: unused low bits set", _low_bit_set(good)),
        ("cut inside the block", good[:-8]),
        ("another volume's target", names.b64u(header.encode(os.urandom(32), vk.volume_id) + good_blocks)),
    ]
    return [{"case": c, "lower_target": t} for c, t in cases]


def negative_dirivs() -> list[dict[str, object]]:
    """What a directory's strongroom.diriv may not be (§6): each makes its directory unreadable."""
    return [
        {"case": "15 bytes", "type": "file", "content_hex": os.urandom(15).hex()},
        {"case": "17 bytes", "type": "file", "content_hex": os.urandom(17).hex()},
        {"case": "empty", "type": "file", "content_hex": ""},
        {"case": "a symbolic link to a 16-byte file", "type": "symlink", "content_hex": os.urandom(16).hex()},
        {"case": "a directory", "type": "directory", "content_hex": ""},
        {"case": "a FIFO", "type": "fifo", "content_hex": ""},
    ]


def negative_standalone(vk: keys.VolumeKeys) -> list[dict[str, str]]:
    """Standalone files (§7, keyed by the vectors' volume) a reader must refuse, with the refusal."""
    plain = os.urandom(3 * 4096 + 100)
    made = io.BytesIO()
    standalone.encrypt_stream(io.BytesIO(plain), made, vk.volume_id, vk.kek, None, 1)
    good = made.getvalue()
    other = io.BytesIO()
    standalone.encrypt_stream(io.BytesIO(plain), other, vk.volume_id, vk.kek, None, 1)
    (length,) = struct.unpack(">I", good[4:8])
    body = 8 + length
    end = len(good) - content.END_MARKER
    wrong_volume = good.replace(names.b64u(vk.volume_id).encode(), names.b64u(os.urandom(16)).encode())
    cases = [
        ("cut at a block boundary, its end marker kept", good[: body + content.HEADER + 2 * content.CBLOCK] + good[end:], "cut"),
        ("without its end marker (its last 36 bytes are taken for one: the last block is cut)", good[:end], "block 3"),
        ("another file's end marker", good[:end] + other.getvalue()[-content.END_MARKER :], "end marker"),
        ("an envelope length above 65,536", good[:4] + struct.pack(">I", 65537) + good[8:], "envelope too large"),
        ("another volume's id in the envelope", wrong_volume, "header does not authenticate"),
        ("empty", b"", "bad magic"),
        ("made before a rotation, read with the new KEK alone", good, "header does not authenticate"),
    ]
    return [{"case": c, "encrypted_hex": d.hex(), "refusal": r} for c, d, r in cases]


def whole_tree(vol: Path, vk: keys.VolumeKeys) -> dict[str, object]:
    """A small version-4 tree written through the product's operations (no mount), then read back
    as lower entries: directories (one moved, so it stores its tweak; one with a long name),
    files (empty, one block, sparse with holes), a symlink, long and non-ASCII names, a hard link
    and an attribute.  ``plaintext`` is what a reader must list, by plaintext path."""
    from strongroom.fs.fuse_ops import VolumeOps

    ops = VolumeOps(str(vol), vk)

    def write(path: str, data: bytes, at: int = 0) -> None:
        fh = ops.create(path, 0o644, os.O_WRONLY)
        ops.write(path, data, at, fh)
        ops.release(path, fh)

    ops.mkdir("/docs", 0o755)
    ops.mkdir("/docs/old name", 0o755)
    ops.rename("/docs/old name", "/docs/moved")
    ops.mkdir("/" + "d" * 200, 0o755)
    write("/docs/moved/notes.txt", b"moved directory, stored tweak\n")
    write("/" + "d" * 200 + "/inside", b"under a long-named directory")
    write("/empty", b"")
    write("/sparse", b"after two holes", 2 * 4096 + 10)
    write("/Grüße ☃.txt", b"non-ASCII name")
    write("/" + "n" * 180, b"a long file name")
    ops.link("/docs/hard link", "/empty")
    ops.unlink("/docs/hard link")
    write("/one", b"one block" * 100)
    ops.link("/docs/second name", "/one")
    ops.symlink("/link", "docs/moved/notes.txt")
    ops.setxattr("/one", "user.comment", b"an attribute", 0)
    entries = []
    inodes: dict[int, str] = {}
    for lower in sorted(vol.rglob("*")):
        rel = str(lower.relative_to(vol))
        if rel.startswith("strongroom.volume.json"):
            continue
        st = lower.lstat()
        entry: dict[str, object] = {"path": rel}
        if lower.is_symlink():
            entry.update(type="symlink", target=os.readlink(lower))
        elif lower.is_dir():
            entry.update(type="directory")
        elif st.st_ino in inodes:
            entry.update(type="hard link", link_of=inodes[st.st_ino])
        else:
            inodes[st.st_ino] = rel
            entry.update(type="file", content_hex=lower.read_bytes().hex())
            attrs = {a: os.getxattr(lower, a).hex() for a in os.listxattr(lower) if a.startswith(xattrs.PREFIX)}
            if attrs:
                entry["xattrs_hex"] = attrs
        entries.append(entry)
    plaintext = {
        "/docs": None,
        "/docs/moved": None,
        "/docs/moved/notes.txt": "moved directory, stored tweak\n",
        "/docs/second name": "one block" * 100,
        "/" + "d" * 200: None,
        "/" + "d" * 200 + "/inside": "under a long-named directory",
        "/empty": "",
        "/sparse": "\x00" * (2 * 4096 + 10) + "after two holes",
        "/Grüße ☃.txt": "non-ASCII name",
        "/" + "n" * 180: "a long file name",
        "/one": "one block" * 100,
        "/link": "-> docs/moved/notes.txt",
    }
    return {"entries": entries, "plaintext": plaintext, "xattrs": {"/one": {"user.comment": "an attribute"}}}


def version_5() -> dict[str, object]:
    """A version-5 volume (FORMAT.md §2, §5, §6): its config and every key, one whole lower tree,
    the salted and kinded objects one by one, and what a version-5 reader must refuse."""
    with tempfile.TemporaryDirectory() as tmp:
        vol = Path(tmp) / "vol"
        volume.init_volume(vol, PASSPHRASE, recovery_passphrase="recovery words")
        written = json.loads((vol / config.CONFIG).read_text())
        root = (vol / names.DIRIV).read_bytes()
        vk = config.VolumeConfig.from_json(written).unlock_passphrase(PASSPHRASE)
        tree = {"config": written, "root_diriv_hex": root.hex(), **whole_tree(vol, vk)}
    iv = root[: names.DIRIV_BYTES]
    tw = names.Tweaks(5, vk.dir_ids, vk.volume_id)
    nc = names.NameCipher(vk.names)
    plain = bytes(range(256)) * 20 + b"tail"
    header = content.FileHeader.fresh(keys.FILE)
    lower = header.encode(vk.kek, vk.volume_id) + content.FileCipher(header).seal(0, plain)
    target = b"../a symlink target"
    sh = content.FileHeader.fresh(keys.SYMLINK)
    link = sh.encode(vk.kek, vk.volume_id) + content.FileCipher(sh).seal(0, target)
    export = io.BytesIO()
    standalone.encrypt_stream(io.BytesIO(b"exported with the volume's key\n" * 40), export, vk.volume_id, vk.kek, None, 1)
    (length,) = struct.unpack(">I", export.getvalue()[4:8])
    stripped = export.getvalue()[8 + length : -content.END_MARKER]
    xc = xattrs.XattrCipher(vk.xattr_names, vk.xattr_values, salted=True)
    x_lower = xc.lower_name("user.origin")
    file_id = header.file_id
    dir_lower = nc.lower_name(b"a directory", iv)[0]
    other_lower = nc.lower_name(b"another directory", iv)[0]
    moved_iv = os.urandom(16)  # a moved directory's tweak (its old one)
    record = tw.record(moved_iv, iv, dir_lower)
    two = tw.record(moved_iv, iv, dir_lower, also=(iv, other_lower))
    flipped = record[:-1] + bytes([record[-1] ^ 1])
    v5 = config.VolumeConfig.from_json(written)

    weak = config.passphrase_source(vk.kek, vk.volume_id, PASSPHRASE, "primary")
    weak["kdf"]["memory_kib"] = 4096  # (below the floor; the seal itself is not remade: refused first)
    return {
        "passphrase": PASSPHRASE,
        "config": written,
        "keys_hex": {
            "kek": vk.kek.hex(),
            "names": vk.names.hex(),
            "xattr-names": vk.xattr_names.hex(),
            "xattr-values": vk.xattr_values.hex(),
            "rules-mac": vk.rules_mac.hex(),
            "dir-ids": vk.dir_ids.hex(),
        },
        "root_diriv_hex": root.hex(),
        "root_tweak_hex": iv.hex(),
        "derived_tweak": {
            "parent_hex": iv.hex(),
            "lower_name": dir_lower,
            "tweak_hex": tw.derive(iv, dir_lower).hex(),
        },
        "stored_tweak": {
            "parent_hex": iv.hex(),
            "lower_name": dir_lower,
            "diriv_hex": record.hex(),
            "during_a_move_hex": two.hex(),
            "moving_to": other_lower,
            "tweak_hex": moved_iv.hex(),
        },
        "file": {"plaintext_hex": plain.hex(), "lower_hex": lower.hex()},
        "symlink": {"target": target.decode(), "lower_target": names.b64u(link)},
        "xattr_bound": {
            "name": "user.origin",
            "lower_name": x_lower,
            "value": "bound and salted",
            "file_id_hex": file_id.hex(),
            "file_value_hex": xc.seal_value(x_lower, b"bound and salted", xattrs.file_binding(file_id)).hex(),
        },
        "standalone_volume": {"plaintext": "exported with the volume's key\n" * 40, "encrypted_hex": export.getvalue().hex()},
        "tree": tree,
        "negative_files": [
            {"case": "a symlink's sealed target stored as a file", "lower_hex": link.hex(), "refusal": "object kind"},
            {
                "case": "a volume-keyed export without its envelope and end marker",
                "lower_hex": stripped.hex(),
                "refusal": "object kind",
            },
            {
                "case": "a version-4 header (version 1, no kind)",
                "lower_hex": (
                    content.FileHeader(header.file_id, header.file_key).encode(vk.kek, vk.volume_id) + lower[84:]
                ).hex(),
                "refusal": "unsupported file version",
            },
            {
                "case": "an unknown kind (4)",
                "lower_hex": (lower[:6] + b"\x00\x04" + lower[8:]).hex(),
                "refusal": "unsupported file version",
            },
        ],
        "negative_symlinks": [{"case": "a file's lower bytes as a symlink target", "lower_target": names.b64u(lower)}],
        "negative_dirivs": [
            {"case": "a bare 16-byte tweak (as version 4 stores)", "content_hex": moved_iv.hex()},
            {
                "case": "another place's record (a swapped or moved directory)",
                "content_hex": tw.record(moved_iv, iv, other_lower).hex(),
            },
            {"case": "its tag flipped", "content_hex": flipped.hex()},
            {"case": "33 bytes", "content_hex": (record + b"\x00").hex()},
        ],
        "negative_xattrs": [
            {
                "case": "a version-4 (unsalted) value",
                "lower_name": x_lower,
                "binding_hex": xattrs.file_binding(file_id).hex(),
                "value_hex": xattrs.XattrCipher(vk.xattr_names, vk.xattr_values)
                .seal_value(x_lower, b"bound and salted", xattrs.file_binding(file_id))
                .hex(),
            }
        ],
        "negative_configs": [
            {
                "case": "a key source's role changed (checksum recomputed)",
                "config": edited(written, lambda c: c["key_sources"][1].update(role="primary")),
                "refusal": "parameters were changed",
            },
            {
                "case": "a key source's KDF memory below version 5's floor (checksum recomputed)",
                "config": edited(written, lambda c: c["key_sources"].__setitem__(0, weak)),
                "refusal": "refused",
            },
            {
                "case": "a trustee source added (checksum recomputed)",
                "config": edited(
                    written,
                    lambda c: c["key_sources"].append(
                        config.trustee_source(vk.kek, vk.volume_id, ["https://attacker.example"], "x", "y", os.urandom(32))
                    ),
                ),
                "refusal": "parameters were changed",
            },
            {
                "case": "the version lowered to 4 (checksum recomputed)",
                "config": edited(written, lambda c: c.update(version=4)),
                "refusal": "wrong passphrase",  # a version-4 reader opens no salted seal
            },
        ],
        "params_mac_hex": v5.params_mac.hex(),
    }


def as_version_4(vol: Path) -> None:
    """A new volume made as a version-4 writer makes it: unsalted seals, no dir-ids key, a bare
    16-byte root tweak (test only: the product writes version 5)."""
    cfg = config.VolumeConfig.load(vol)
    vk = cfg.unlock_passphrase(PASSPHRASE)
    old = keys.VolumeKeys(vk.volume_id, vk.kek, vk.names, vk.xattr_names, vk.xattr_values, vk.rules_mac, version=4)
    cfg.wrapped = old.wrapped()
    cfg.key_sources = [
        config.passphrase_source(vk.kek, vk.volume_id, PASSPHRASE, "primary", 4),
        config.passphrase_source(vk.kek, vk.volume_id, "recovery words", "recovery", 4),
    ]
    (vol / names.DIRIV).chmod(0o600)
    (vol / names.DIRIV).write_bytes((vol / names.DIRIV).read_bytes()[: names.DIRIV_BYTES])
    cfg.version = 4
    cfg.params_mac = cfg._mac(vk.rules_mac)
    cfg.save(vol)


def main() -> None:
    os.environ["STRONGROOM_ARGON2_MEMORY_KIB"] = "8192"  # the floor: cheap, stored in the vector
    os.environ["STRONGROOM_ARGON2_ITERATIONS"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        vol = Path(tmp) / "vol"
        volume.init_volume(vol, PASSPHRASE, recovery_passphrase="recovery words")
        as_version_4(vol)
        written = json.loads((vol / config.CONFIG).read_text())
        diriv = (vol / names.DIRIV).read_bytes()
        vk = config.VolumeConfig.from_json(written).unlock_passphrase(PASSPHRASE)
        tree = {"config": written, "root_diriv_hex": diriv.hex(), **whole_tree(vol, vk)}
    cfg_json = _resealed(written, vk, version=1)  # the base vectors are a version-1 volume
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
        "keys_hex": {
            "kek": vk.kek.hex(),
            "names": vk.names.hex(),
            "xattr-names": vk.xattr_names.hex(),
            "xattr-values": vk.xattr_values.hex(),
            "rules-mac": vk.rules_mac.hex(),
        },
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
        "configs": configs_by_version(vk, cfg_json),
        "tree": tree,
        "negative_xattrs": negative_xattrs(xc),
        "negative_symlinks": negative_symlinks(vk),
        "negative_dirivs": negative_dirivs(),
        "negative_standalone": negative_standalone(vk),
        "long_name_directory_tweak": {
            "parent_hex": diriv.hex(),
            "lower_name": long_lower,
            "tweak_hex": names.derived_diriv(diriv, long_lower).hex(),
            "note": "a directory with a long name derives its tweak from its whole lower name (§6)",
        },
        "negative_configs": negative_configs(vk, cfg_json),
        "v5": version_5(),
    }
    OUT.write_text(json.dumps(vectors, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
