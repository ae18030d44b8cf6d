"""The format of docs/FORMAT.md: the product and an independent decryptor written from the spec
(spec_decryptor.py) agree on the fixed vectors, in both directions."""

from __future__ import annotations

import dataclasses
import errno
import io
import json
import os
import unicodedata
from pathlib import Path

import pytest

from strongroom.fs import config, content, keys, names, native, standalone, xattrs
from tests.fs import spec_decryptor as spec

pytestmark = pytest.mark.unit  # the fast tier: no root, FUSE, PostgreSQL or server process

V = json.loads(Path(__file__).with_name("vectors.json").read_text())


@pytest.fixture(scope="module")
def vk() -> keys.VolumeKeys:
    return config.VolumeConfig.from_json(V["config"]).unlock_passphrase(V["passphrase"])


def test_both_passphrases_and_the_spec_unlock_the_same_keys(vk: keys.VolumeKeys) -> None:
    assert vk.kek.hex() == V["keys_hex"]["kek"] and vk.names.hex() == V["keys_hex"]["names"]
    recovered = config.VolumeConfig.from_json(V["config"]).unlock_passphrase(V["recovery_passphrase"])
    assert recovered == vk
    sk = spec.unlock(V["config"], V["passphrase"])
    assert sk["kek"] == vk.kek and sk["names"] == vk.names and sk["xattr-values"] == vk.xattr_values
    with pytest.raises(config.ConfigError, match="wrong passphrase"):
        config.VolumeConfig.from_json(V["config"]).unlock_passphrase("nope")


def test_file_vector_decrypts_with_product_and_spec(vk: keys.VolumeKeys) -> None:
    lower, plain = bytes.fromhex(V["file"]["lower_hex"]), bytes.fromhex(V["file"]["plaintext_hex"])
    header = content.FileHeader.decode(lower[:84], vk.kek, vk.volume_id)
    assert content.FileCipher(header).open(0, lower[84:]) == plain
    assert spec.decrypt_file(lower, vk.kek, vk.volume_id) == plain
    assert content.plain_size(len(lower)) == len(plain) and content.lower_size(len(plain)) == len(lower)


def test_sparse_file_vector_reads_with_holes_only_where_the_format_allows_them(vk: keys.VolumeKeys) -> None:
    lower, plain = bytes.fromhex(V["sparse_file"]["lower_hex"]), bytes.fromhex(V["sparse_file"]["plaintext_hex"])
    header = content.FileHeader.decode(lower[:84], vk.kek, vk.volume_id)
    last = (len(plain) - 1) // content.BLOCK
    for compiled in (True, False):
        cipher = content.FileCipher(header, compiled=compiled)
        assert cipher.open(0, lower[84:], hole_limit=last) == plain  # version 3
        with pytest.raises(content.DamagedFile, match="block 1"):
            cipher.open(0, lower[84:])  # versions 1 and 2: an all-zero block is damage
        zeroed_last = lower[: content.block_offset(last)] + bytes(len(lower) - content.block_offset(last))
        with pytest.raises(content.DamagedFile, match="block 2"):
            cipher.open(0, zeroed_last[84:], hole_limit=last)  # the last block is never a hole
    assert spec.decrypt_file(lower, vk.kek, vk.volume_id, holes=True) == plain
    first = V["sparse_file"]["hole_at_block_0"]  # block 0 may be a hole too, when it is not the last
    assert _code_reads(bytes.fromhex(first["lower_hex"]), vk, True).hex() == first["plaintext_hex"]
    assert spec.decrypt_file(bytes.fromhex(first["lower_hex"]), vk.kek, vk.volume_id, holes=True).hex() == first["plaintext_hex"]
    with pytest.raises(Exception):  # noqa: B017 - the spec's OPEN fails on the hole without the rule
        spec.decrypt_file(lower, vk.kek, vk.volume_id, holes=False)


def test_product_output_decrypts_with_the_spec(vk: keys.VolumeKeys) -> None:
    for size in (1, 4095, 4096, 4097, 3 * 4096, 100_000):
        plain = os.urandom(size)
        h = content.FileHeader.fresh()
        lower = h.encode(vk.kek, vk.volume_id) + content.FileCipher(h).seal(0, plain)
        assert len(lower) == content.lower_size(size)
        assert spec.decrypt_file(lower, vk.kek, vk.volume_id) == plain


def test_names_are_deterministic_and_match_the_vectors(vk: keys.VolumeKeys) -> None:
    iv = bytes.fromhex(V["root_diriv_hex"])
    nc = names.NameCipher(vk.names)
    for n in V["names"]:
        lower, sidecar = nc.lower_name(n["plaintext"].encode(), iv)
        assert (lower, sidecar) == (n["lower"], n["sidecar"])  # SIV: the same name, the same lower name
        assert spec.decrypt_name(lower, vk.names, iv, sidecar) == n["plaintext"].encode()
        assert nc.decrypt(sidecar or lower, iv) == n["plaintext"].encode()
    assert V["names"][1]["lower"].startswith("strongroom.longname.") and len(V["names"][1]["sidecar"]) > 175
    other_dir = names.new_diriv()
    assert nc.lower_name(b"hello, world.txt", other_dir)[0] != V["names"][0]["lower"]
    with pytest.raises(names.BadName):
        nc.decrypt(V["names"][0]["lower"], other_dir)  # an entry moved to another directory


def test_xattr_vector(vk: keys.VolumeKeys) -> None:
    x = V["xattr"]
    xc = xattrs.XattrCipher(vk.xattr_names, vk.xattr_values)
    assert xc.lower_name(x["name"]) == x["lower_name"]
    assert xc.open_value(x["lower_name"], bytes.fromhex(x["lower_value_hex"]), None) == x["value"].encode()
    assert spec.decrypt_xattr(
        x["lower_name"], bytes.fromhex(x["lower_value_hex"]), spec.unlock(V["config"], V["passphrase"])
    ) == (
        x["name"],
        x["value"].encode(),
    )


def test_bound_xattr_vector(vk: keys.VolumeKeys) -> None:
    """Version 4: the value opens only with its own binding (file id, directory tweak, or empty)."""
    x = V["xattr_bound"]
    xc = xattrs.XattrCipher(vk.xattr_names, vk.xattr_values)
    sk = spec.unlock(V["config"], V["passphrase"])
    assert xc.lower_name(x["name"]) == x["lower_name"]
    bindings = {
        "file_value_hex": b"file\x00" + bytes.fromhex(x["file_id_hex"]),
        "dir_value_hex": b"dir\x00" + bytes.fromhex(x["dir_tweak_hex"]),
        "empty_value_hex": b"empty",
    }
    assert bindings["file_value_hex"] == xattrs.file_binding(bytes.fromhex(x["file_id_hex"]))
    assert bindings["dir_value_hex"] == xattrs.dir_binding(bytes.fromhex(x["dir_tweak_hex"]))
    for field, binding in bindings.items():
        sealed = bytes.fromhex(x[field])
        assert xc.open_value(x["lower_name"], sealed, binding) == x["value"].encode()
        assert spec.decrypt_xattr(x["lower_name"], sealed, sk, binding) == (x["name"], x["value"].encode())
        for other in [b for b in bindings.values() if b != binding] + [None, binding[:-1] + b"?"]:
            with pytest.raises(keys.WrongKey):  # moved to another file, or read by version 3's rule
                xc.open_value(x["lower_name"], sealed, other)


def test_standalone_vector_and_round_trip() -> None:
    data = bytes.fromhex(V["standalone"]["encrypted_hex"])
    plain = V["standalone"]["plaintext"].encode()
    assert spec.decrypt_standalone(data, V["passphrase"]) == plain
    out = io.BytesIO()
    standalone.decrypt_stream(io.BytesIO(data), out, lambda env: [standalone.kek_from_passphrase(env, V["passphrase"])])
    assert out.getvalue() == plain
    for size in (0, 1, 4096, 1 << 20, (1 << 20) + 4097, 3 << 20):
        plain = os.urandom(size)
        enc = io.BytesIO()
        standalone.encrypt_with_passphrase(io.BytesIO(plain), enc, "pw")
        assert spec.decrypt_standalone(enc.getvalue(), "pw") == plain
        back = io.BytesIO()
        standalone.decrypt_stream(io.BytesIO(enc.getvalue()), back, lambda env: [standalone.kek_from_passphrase(env, "pw")])
        assert back.getvalue() == plain


def test_config_tampering_is_refused() -> None:
    bad = json.loads(json.dumps(V["config"]))
    bad["long_name_max"] = 100
    with pytest.raises(config.ConfigError, match="parameters were changed"):
        config.VolumeConfig.from_json(bad).unlock_passphrase(V["passphrase"])
    bad = json.loads(json.dumps(V["config"]))
    bad["wrapped"]["names"] = bad["wrapped"]["xattr-names"]  # a wrapped key moved to another purpose
    with pytest.raises(config.ConfigError, match="do not open"):
        config.VolumeConfig.from_json(bad).unlock_passphrase(V["passphrase"])
    bad = json.loads(json.dumps(V["config"]))
    bad["version"] = 6
    with pytest.raises(config.ConfigError, match="version 6; this Strongroom reads versions 1, 2, 3, 4 and 5"):
        config.VolumeConfig.from_json(bad)
    bad["version"] = 2  # the vectors' volume is version 1: the version is a parameter params_mac covers
    with pytest.raises(config.ConfigError, match="parameters were changed"):
        config.VolumeConfig.from_json(bad).unlock_passphrase(V["passphrase"])
    with pytest.raises(config.ConfigError, match="corrupt"):
        config.VolumeConfig.from_json({"format": "strongroom-volume", "version": 1})


def _code_reads(lower: bytes, vk: keys.VolumeKeys, holes: bool) -> bytes:
    """A reader of one lower file, by the code: its size, header and blocks (§5)."""
    size = content.plain_size(len(lower))
    if not size:
        return b""
    header = content.FileHeader.decode(lower[: content.HEADER], vk.kek, vk.volume_id)
    hole_limit = (size - 1) // content.BLOCK if holes else 0
    return content.FileCipher(header).open(0, lower[content.HEADER :], hole_limit)


@pytest.mark.parametrize("case", V["negative_files"], ids=lambda c: c["case"])
def test_negative_file_vectors_are_refused_by_the_code_and_the_spec(vk: keys.VolumeKeys, case: dict) -> None:
    lower = bytes.fromhex(case["lower_hex"])
    with pytest.raises((content.DamagedFile, native.BadBlock)) as e:
        _code_reads(lower, vk, case["holes"])
    err = e.value
    said = f"block {err.block}" if isinstance(err, native.BadBlock) else str(err)
    if isinstance(err, content.DamagedFile) and err.block is not None and case["refusal"].startswith("block"):
        said = f"block {err.block}"
    assert case["refusal"] in said, (case["case"], said)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the spec's reader raises whatever its primitives raise
        spec.decrypt_file(lower, vk.kek, vk.volume_id, case["holes"])


@pytest.mark.parametrize("case", V["negative_names"], ids=lambda c: c["case"])
def test_negative_name_vectors_are_not_names(vk: keys.VolumeKeys, case: dict) -> None:
    diriv = bytes.fromhex(V["root_diriv_hex"])
    nc = names.NameCipher(vk.names)
    with pytest.raises(names.BadName):  # what the mount's listing and fsck do with a lower name
        if case["sidecar"] is not None:
            full = names.sidecar_text(case["lower"], case["sidecar"].encode())
            nc.check_form(full, long=True)
            nc.decrypt(full, diriv)
        else:
            nc.check_form(case["lower"], long=False)
            nc.decrypt(case["lower"], diriv)
    with pytest.raises(Exception):  # noqa: B017, PT011
        spec.decrypt_name(case["lower"], vk.names, diriv, case["sidecar"])


def test_more_positive_vectors(vk: keys.VolumeKeys) -> None:
    sk = spec.unlock(V["config"], V["passphrase"])
    diriv = bytes.fromhex(V["root_diriv_hex"])
    nc = names.NameCipher(vk.names)
    # a symlink's target, encrypted as a file (§5)
    sealed = names.unb64u(V["symlink"]["lower_target"])
    assert spec.decrypt_file(sealed, sk["kek"], sk["volume_id"]).decode() == V["symlink"]["target"]
    assert _code_reads(sealed, vk, False).decode() == V["symlink"]["target"]
    # a non-ASCII name, and a non-ASCII passphrase opening the same KEK
    n = V["non_ascii_name"]
    assert nc.decrypt(n["lower"], diriv).decode() == n["plaintext"] == spec.decrypt_name(n["lower"], vk.names, diriv).decode()
    p = V["non_ascii_passphrase"]
    with_source = json.loads(json.dumps(V["config"]))
    with_source["key_sources"] = [p["source"]]
    assert config.VolumeConfig.from_json(with_source).unlock_passphrase(p["passphrase"]).kek == vk.kek
    assert spec.unlock(with_source, p["passphrase"])["kek"] == vk.kek
    with pytest.raises(config.ConfigError):  # the same text in another Unicode normalization is another passphrase
        config.VolumeConfig.from_json(with_source).unlock_passphrase(unicodedata.normalize("NFD", p["passphrase"]))
    # an empty file, and a hard link's two names for one file
    assert _code_reads(b"", vk, True) == spec.decrypt_file(b"", sk["kek"], sk["volume_id"]) == b""
    link = V["hard_link"]
    for name in link["names"]:
        assert nc.decrypt(name["lower"], diriv).decode() == name["plaintext"]
    assert _code_reads(bytes.fromhex(link["lower_hex"]), vk, False) == bytes.fromhex(V["file"]["plaintext_hex"])
    # a version-2 config opens with the same keys; its directories derive their tweaks (§6)
    v2 = config.VolumeConfig.from_json(V["config_v2"])
    assert v2.version == 2 and v2.derived_tweaks and not v2.holes
    assert v2.unlock_passphrase(V["passphrase"]).kek == vk.kek and spec.unlock(V["config_v2"], V["passphrase"])["kek"] == vk.kek
    # a standalone file keyed by the volume (§7)
    data = bytes.fromhex(V["standalone_volume"]["encrypted_hex"])
    assert spec.decrypt_standalone(data, volume_kek=vk.kek).decode() == V["standalone_volume"]["plaintext"]
    out = io.BytesIO()
    standalone.decrypt_stream(io.BytesIO(data), out, lambda env: [vk.kek])
    assert out.getvalue().decode() == V["standalone_volume"]["plaintext"]


def test_spec_canonical_json_is_the_configs_encoding() -> None:
    """§4 defines canonical JSON in bytes; the spec's encoder, written from that text, gives the
    bytes every checksum and params_mac of the vectors was made over."""
    odd = {"x": '\x7f\x01\n/é\U0001f600"\\', "a": [1, -2, True, None]}
    samples = [V["config"], *(c for c in V["configs"].values() if "format" in c), odd]
    for sample in samples:
        assert spec.canonical(sample) == json.dumps(sample, sort_keys=True, separators=(",", ":")).encode()


@pytest.mark.parametrize("version", ["v1", "v2", "v3", "v4", "v4_acl"])
def test_each_version_s_config_opens_to_the_same_keys(vk: keys.VolumeKeys, version: str) -> None:
    cfg = V["configs"][version]
    got = config.VolumeConfig.from_json(cfg)
    n = int(version[1])
    assert (got.version, got.derived_tweaks, got.holes, got.bound_xattrs) == (n, n >= 2, n >= 3, n >= 4)
    assert ("checksum" in cfg) == (n >= 3)
    assert got.unlock_passphrase(V["passphrase"]) == dataclasses.replace(vk, version=n)
    sk = spec.unlock(cfg, V["passphrase"])
    assert [sk[p] for p in ("kek", "names", "xattr-names", "xattr-values", "rules-mac")] == [
        bytes.fromhex(V["keys_hex"][p]) for p in ("kek", "names", "xattr-names", "xattr-values", "rules-mac")
    ]
    if version == "v4_acl":
        assert got.verified_acl_floor(vk.rules_mac) == 3


def test_a_rotated_volume_opens_standalone_files_made_before_with_its_ring(vk: keys.VolumeKeys) -> None:
    r = V["configs"]["v4_rotated"]
    cfg = config.VolumeConfig.from_json(r["config"])
    now = cfg.unlock_passphrase(V["passphrase"])
    assert now.kek.hex() == r["kek_hex"] and now.names == vk.names
    assert [k.hex() for k in cfg.retired_keks(now.kek)] == r["retired_keks_hex"]
    sk = spec.unlock(r["config"], V["passphrase"])
    ring = spec.retired_keks(r["config"], sk)
    before = bytes.fromhex(r["standalone_before_hex"])
    assert spec.decrypt_standalone(before, volume_kek=sk["kek"], retired=ring).decode() == r["standalone_before_plaintext"]
    out = io.BytesIO()
    standalone.decrypt_stream(io.BytesIO(before), out, lambda env: [now.kek, *cfg.retired_keks(now.kek)])
    assert out.getvalue().decode() == r["standalone_before_plaintext"]
    with pytest.raises(Exception):  # noqa: B017, PT011 - the current KEK alone does not open it
        spec.decrypt_standalone(before, volume_kek=sk["kek"])


def test_a_trustee_key_source_opens_with_its_deposit(vk: keys.VolumeKeys) -> None:
    t = V["configs"]["v4_trustee"]
    deposit = bytes.fromhex(t["deposit_hex"])
    cfg = config.VolumeConfig.from_json(t["config"])
    assert cfg.unlock_trustee(lambda source: deposit) == dataclasses.replace(vk, version=4)
    assert spec.unlock(t["config"], deposit=deposit)["kek"] == vk.kek
    with pytest.raises(config.ConfigError, match="does not open"):
        cfg.unlock_trustee(lambda source: bytes(32))


@pytest.mark.parametrize("case", V["negative_configs"], ids=lambda c: c["case"])
def test_negative_config_vectors_are_refused_by_the_code_and_the_spec(case: dict) -> None:
    with pytest.raises(config.ConfigError, match=case["refusal"]):
        config.VolumeConfig.from_json(case["config"]).unlock_passphrase(case["passphrase"])
    with pytest.raises(Exception):  # noqa: B017, PT011
        spec.unlock(case["config"], case["passphrase"])


@pytest.mark.parametrize("case", V["negative_xattrs"], ids=lambda c: c["case"])
def test_negative_xattr_vectors_are_refused_by_the_code_and_the_spec(vk: keys.VolumeKeys, case: dict) -> None:
    xc = xattrs.XattrCipher(vk.xattr_names, vk.xattr_values)
    value, binding = bytes.fromhex(case["value_hex"]), bytes.fromhex(case["binding_hex"])
    with pytest.raises((names.BadName, keys.WrongKey)):
        xc.plain_name(case["lower_name"])
        xc.open_value(case["lower_name"], value, binding)
    with pytest.raises(Exception):  # noqa: B017, PT011
        spec.decrypt_xattr(case["lower_name"], value, spec.unlock(V["config"], V["passphrase"]), binding)


@pytest.mark.parametrize("case", V["negative_symlinks"], ids=lambda c: c["case"])
def test_negative_symlink_vectors_are_refused_by_the_code_and_the_spec(vk: keys.VolumeKeys, case: dict) -> None:
    with pytest.raises((ValueError, content.DamagedFile, native.BadBlock)):  # what read_link turns into EIO
        _code_reads(names.unb64u(case["lower_target"]), vk, False)
    with pytest.raises(Exception):  # noqa: B017, PT011
        spec.decrypt_file(spec.unb64u(case["lower_target"]), vk.kek, vk.volume_id)


@pytest.mark.parametrize("case", V["negative_dirivs"], ids=lambda c: c["case"])
def test_negative_diriv_vectors_make_their_directory_unreadable(vk: keys.VolumeKeys, case: dict, tmp_path: Path) -> None:
    from strongroom.fs.beneath import Beneath
    from strongroom.fs.resolver import Resolver

    d = tmp_path / "d"
    d.mkdir()
    stored, raw = d / names.DIRIV, bytes.fromhex(case["content_hex"])
    if case["type"] == "file":
        stored.write_bytes(raw)
    elif case["type"] == "symlink":
        (tmp_path / "elsewhere").write_bytes(raw)
        stored.symlink_to(tmp_path / "elsewhere")
    elif case["type"] == "directory":
        stored.mkdir()
    else:
        os.mkfifo(stored)  # a reader that opened it to read would hang here
    told: list[str] = []
    nc = names.NameCipher(vk.names)
    resolver = Resolver(str(tmp_path), nc, names.Tweaks(4), lambda what, block, why: told.append(why), Beneath(str(tmp_path)))
    with pytest.raises(OSError) as e:
        resolver.tweak(str(d), bytes(16), "d")
    assert e.value.errno == errno.EIO and told
    with pytest.raises(ValueError):  # noqa: PT011
        spec.directory_tweak(d, bytes(16), 4)


@pytest.mark.parametrize("case", V["negative_standalone"], ids=lambda c: c["case"])
def test_negative_standalone_vectors_are_refused_by_the_code_and_the_spec(vk: keys.VolumeKeys, case: dict) -> None:
    data = bytes.fromhex(case["encrypted_hex"])
    kek = os.urandom(32) if "new KEK" in case["case"] else vk.kek  # the rotation case: a KEK that did not make it
    with pytest.raises((standalone.NotStandalone, content.DamagedFile, native.BadBlock)) as e:
        standalone.decrypt_stream(io.BytesIO(data), io.BytesIO(), lambda env: [kek])
    assert case["refusal"] in str(e.value), (case["case"], str(e.value))
    with pytest.raises(Exception):  # noqa: B017, PT011
        spec.decrypt_standalone(data, volume_kek=kek)


def test_a_long_named_directory_derives_its_tweak_from_its_whole_lower_name() -> None:
    t = V["long_name_directory_tweak"]
    assert t["lower_name"].startswith(names.LONG_PREFIX)
    parent = bytes.fromhex(t["parent_hex"])
    assert names.derived_diriv(parent, t["lower_name"]).hex() == t["tweak_hex"]
    assert spec.derive_tweak(parent, t["lower_name"]).hex() == t["tweak_hex"]


def _materialize(tree: dict, where: Path) -> Path:
    vol = where / "vol"
    vol.mkdir()
    (vol / config.CONFIG).write_text(json.dumps(tree["config"]))
    for e in tree["entries"]:
        at = vol / e["path"]
        if e["type"] == "directory":
            at.mkdir()
        elif e["type"] == "symlink":
            at.symlink_to(e["target"])
        elif e["type"] == "hard link":
            os.link(vol / e["link_of"], at)
        else:
            at.write_bytes(bytes.fromhex(e["content_hex"]))
            for name, value in e.get("xattrs_hex", {}).items():
                os.setxattr(at, name, bytes.fromhex(value))
    return vol


@pytest.mark.parametrize("version", ["v4", "v5"])
def test_a_whole_lower_tree_reads_the_same_with_the_code_and_the_spec(tmp_path: Path, version: str) -> None:
    from strongroom.fs.fuse_ops import VolumeOps

    tree = V["tree"] if version == "v4" else V["v5"]["tree"]
    vol = _materialize(tree, tmp_path)
    want = {p: (None if v is None else v.encode()) for p, v in tree["plaintext"].items()}
    got = spec.read_tree(vol, V["passphrase"])
    assert {p: v for p, v in got.items()} == want
    vk = config.VolumeConfig.from_json(tree["config"]).unlock_passphrase(V["passphrase"])
    ops = VolumeOps(str(vol), vk)
    seen: dict[str, bytes | None] = {}
    todo = ["/"]
    while todo:
        d = todo.pop()
        for name, _lower, _ino, _kind in ops.readdir_entries(d):
            if name in (".", ".."):
                continue
            path = d.rstrip("/") + "/" + name
            mode = ops.getattr(path)["st_mode"]
            if (mode & 0o170000) == 0o040000:
                seen[path] = None
                todo.append(path)
            elif (mode & 0o170000) == 0o120000:
                seen[path] = b"-> " + ops.readlink(path).encode()
            else:
                fh = ops.open(path, os.O_RDONLY)
                seen[path] = ops.read(path, 1 << 20, 0, fh)
                ops.release(path, fh)
    assert seen == want
    for path, attrs in tree["xattrs"].items():
        for name, value in attrs.items():
            assert ops.getxattr(path, name) == value.encode()
    sk = spec.unlock(tree["config"], V["passphrase"])
    carriers = [e for e in tree["entries"] if "xattrs_hex" in e]
    assert len(carriers) == 1
    file_id = bytes.fromhex(carriers[0]["content_hex"])[8:24]
    ((lower_name, sealed),) = carriers[0]["xattrs_hex"].items()
    assert spec.decrypt_xattr(lower_name, bytes.fromhex(sealed), sk, b"file\x00" + file_id) == ("user.comment", b"an attribute")


# -- version 5 ----------------------------------------------------------------------------------
V5 = V["v5"]


@pytest.fixture(scope="module")
def vk5() -> keys.VolumeKeys:
    return config.VolumeConfig.from_json(V5["config"]).unlock_passphrase(V5["passphrase"])


def test_v5_config_opens_to_every_key_with_the_code_and_the_spec(vk5: keys.VolumeKeys) -> None:
    assert vk5.version == 5
    sk = spec.unlock(V5["config"], V5["passphrase"])
    for purpose, value in V5["keys_hex"].items():
        assert sk[purpose].hex() == value and vk5.by_purpose(purpose if purpose != "kek" else "names") is not None
    assert vk5.kek.hex() == V5["keys_hex"]["kek"] and vk5.dir_ids.hex() == V5["keys_hex"]["dir-ids"]
    assert spec.unlock(V5["config"], "recovery words")["kek"] == vk5.kek


def test_v5_objects_read_with_the_code_and_the_spec(vk5: keys.VolumeKeys) -> None:
    f = V5["file"]
    lower = bytes.fromhex(f["lower_hex"])
    assert spec.decrypt_file(lower, vk5.kek, vk5.volume_id, True, spec.FILE).hex() == f["plaintext_hex"]
    header = content.FileHeader.decode(lower[:84], vk5.kek, vk5.volume_id, keys.FILE)
    assert content.FileCipher(header).open(0, lower[84:], 1).hex() == f["plaintext_hex"]
    link = names.unb64u(V5["symlink"]["lower_target"])
    assert spec.decrypt_file(link, vk5.kek, vk5.volume_id, kind=spec.SYMLINK).decode() == V5["symlink"]["target"]
    x = V5["xattr_bound"]
    binding = b"file\x00" + bytes.fromhex(x["file_id_hex"])
    sk = spec.unlock(V5["config"], V5["passphrase"])
    assert spec.decrypt_xattr(x["lower_name"], bytes.fromhex(x["file_value_hex"]), sk, binding) == (
        x["name"],
        x["value"].encode(),
    )
    xc = xattrs.XattrCipher(vk5.xattr_names, vk5.xattr_values, salted=True)
    assert xc.open_value(x["lower_name"], bytes.fromhex(x["file_value_hex"]), binding) == x["value"].encode()
    sa = bytes.fromhex(V5["standalone_volume"]["encrypted_hex"])
    assert spec.decrypt_standalone(sa, volume_kek=vk5.kek).decode() == V5["standalone_volume"]["plaintext"]


def test_v5_tweaks_are_keyed_and_bound_to_their_place(vk5: keys.VolumeKeys) -> None:
    tw = names.Tweaks(5, vk5.dir_ids, vk5.volume_id)
    d = V5["derived_tweak"]
    parent = bytes.fromhex(d["parent_hex"])
    assert tw.derive(parent, d["lower_name"]).hex() == d["tweak_hex"]
    assert spec.derive_tweak(parent, d["lower_name"], vk5.dir_ids).hex() == d["tweak_hex"]
    root = bytes.fromhex(V5["root_diriv_hex"])
    assert tw.read(root, None, "").hex() == V5["root_tweak_hex"]
    s = V5["stored_tweak"]
    for raw in (s["diriv_hex"], s["during_a_move_hex"]):
        assert tw.read(bytes.fromhex(raw), parent, s["lower_name"]).hex() == s["tweak_hex"]
    assert tw.read(bytes.fromhex(s["during_a_move_hex"]), parent, s["moving_to"]).hex() == s["tweak_hex"]


@pytest.mark.parametrize("case", V5["negative_dirivs"], ids=lambda c: c["case"])
def test_v5_negative_diriv_vectors_make_their_directory_unreadable(vk5: keys.VolumeKeys, case: dict, tmp_path: Path) -> None:
    s = V5["stored_tweak"]
    parent = bytes.fromhex(s["parent_hex"])
    with pytest.raises(names.BadName):
        names.Tweaks(5, vk5.dir_ids, vk5.volume_id).read(bytes.fromhex(case["content_hex"]), parent, s["lower_name"])
    d = tmp_path / s["lower_name"]
    d.mkdir()
    (d / "strongroom.diriv").write_bytes(bytes.fromhex(case["content_hex"]))
    sk = spec.unlock(V5["config"], V5["passphrase"])
    with pytest.raises(ValueError):
        spec.directory_tweak(d, parent, 5, sk)


@pytest.mark.parametrize("case", V5["negative_files"], ids=lambda c: c["case"])
def test_v5_negative_file_vectors_are_refused_by_the_code_and_the_spec(vk5: keys.VolumeKeys, case: dict) -> None:
    lower = bytes.fromhex(case["lower_hex"])
    with pytest.raises(content.DamagedFile, match=case["refusal"]):
        content.FileHeader.decode(lower[:84], vk5.kek, vk5.volume_id, keys.FILE)
    with pytest.raises(Exception):  # noqa: B017, PT011
        spec.decrypt_file(lower, vk5.kek, vk5.volume_id, True, spec.FILE)


def test_v5_negative_symlink_and_xattr_vectors_are_refused(vk5: keys.VolumeKeys) -> None:
    for case in V5["negative_symlinks"]:
        sealed = names.unb64u(case["lower_target"])
        with pytest.raises(content.DamagedFile, match="object kind"):
            content.FileHeader.decode(sealed[:84], vk5.kek, vk5.volume_id, keys.SYMLINK)
        with pytest.raises(Exception):  # noqa: B017, PT011
            spec.decrypt_file(sealed, vk5.kek, vk5.volume_id, kind=spec.SYMLINK)
    sk = spec.unlock(V5["config"], V5["passphrase"])
    xc = xattrs.XattrCipher(vk5.xattr_names, vk5.xattr_values, salted=True)
    for case in V5["negative_xattrs"]:
        binding, value = bytes.fromhex(case["binding_hex"]), bytes.fromhex(case["value_hex"])
        with pytest.raises(keys.WrongKey):
            xc.open_value(case["lower_name"], value, binding)
        with pytest.raises(Exception):  # noqa: B017, PT011
            spec.decrypt_xattr(case["lower_name"], value, sk, binding)


@pytest.mark.parametrize("case", V5["negative_configs"], ids=lambda c: c["case"])
def test_v5_negative_config_vectors_are_refused_by_the_code_and_the_spec(case: dict) -> None:
    with pytest.raises(config.ConfigError, match=case["refusal"]):
        config.VolumeConfig.from_json(case["config"]).unlock_passphrase(V5["passphrase"])
    with pytest.raises(Exception):  # noqa: B017, PT011
        spec.unlock(case["config"], V5["passphrase"])
