"""Regenerates tests/fs/vectors.json with the product code (run by hand, after a format change):
    .venv/bin/python -m tests.fs.make_vectors
The vectors are then fixed: the tests decrypt them with the product and with spec_decryptor."""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

from strongroom.fs import config, content, names, standalone, volume, xattrs

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
    }
    OUT.write_text(json.dumps(vectors, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
