"""Directory tweaks (docs/FORMAT.md §6): version 2 derives a new directory's tweak from its parent's
and its own lower name (nothing to store, so nothing to make durable); a directory that moves
stores the tweak it had; version-1 volumes keep storing one in every directory.  Each test reads
the lower tree back with the decryptor written from the spec."""

from __future__ import annotations

import json
import os
from pathlib import Path

from strongroom.fs import config, names
from tests.fs import spec_decryptor as spec
from tests.fs.mounts import PASSPHRASE, Mount

V = json.loads(Path(__file__).with_name("vectors.json").read_text())
LONG = "a-directory-with-a-long-name-" * 7  # encrypted, longer than long_name_max: stored hashed


def plain_tree(root: Path) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            p = Path(dirpath, d)
            if p.is_symlink():
                out["/" + str(p.relative_to(root))] = b"-> " + os.fsencode(os.readlink(p))
            else:
                out["/" + str(p.relative_to(root))] = None
        for f in filenames:
            p = Path(dirpath, f)
            rel = "/" + str(p.relative_to(root))
            out[rel] = b"-> " + os.fsencode(os.readlink(p)) if p.is_symlink() else p.read_bytes()
    return out


def stored_tweaks(lower: Path) -> set[str]:
    """Lower directories (relative to the volume) that hold a strongroom.diriv."""
    return {str(p.parent.relative_to(lower)) for p in lower.rglob(names.DIRIV)}


def build(mnt: Path) -> None:
    (mnt / "a" / "b" / "c").mkdir(parents=True)
    (mnt / "a" / "b" / "c" / "deep.txt").write_bytes(b"deep" * 3000)
    (mnt / LONG).mkdir()
    (mnt / LONG / "inside").write_text("under a long name")
    (mnt / "moving" / "sub").mkdir(parents=True)
    (mnt / "moving" / "sub" / "f").write_text("moved with its directory")
    (mnt / "a" / "link").symlink_to("b/c/deep.txt")


def test_derived_tweak_vector() -> None:
    d = V["derived_tweak"]
    parent = bytes.fromhex(d["parent_hex"])
    assert names.derived_diriv(parent, d["lower_name"]).hex() == d["tweak_hex"]
    assert spec.derive_tweak(parent, d["lower_name"]).hex() == d["tweak_hex"]
    assert names.derived_diriv(parent, d["lower_name"] + "x") != bytes.fromhex(d["tweak_hex"])
    assert names.derived_diriv(os.urandom(16), d["lower_name"]) != bytes.fromhex(d["tweak_hex"])


def test_new_directories_store_no_tweak_and_read_back_with_the_spec(vol: Mount) -> None:
    assert json.loads((vol.lower / config.CONFIG).read_text())["version"] == config.VERSION
    build(vol.mnt)
    assert stored_tweaks(vol.lower) == {"."}  # the root's only: every other one is derived
    # A moved directory keeps its tweak by storing it; what it contains is not rewritten.
    (vol.mnt / "a" / "b").mkdir(exist_ok=True)
    os.rename(vol.mnt / "moving", vol.mnt / "a" / "b" / "moved")
    os.rename(vol.mnt / "a" / "b" / "c", vol.mnt / "a" / "b" / "c2")  # renamed in place: same rule
    (vol.mnt / "moving").mkdir()  # a new directory where the old one was: a derived tweak again
    (vol.mnt / "moving" / "new").write_text("new")
    expected = plain_tree(vol.mnt)
    assert expected["/a/b/moved/sub/f"] == b"moved with its directory"
    assert len(stored_tweaks(vol.lower)) == 3  # the root, "moved" and "c2"
    vol.stop()
    assert spec.read_tree(vol.lower, PASSPHRASE) == expected
    vol.start()  # every tweak found again from disk
    assert plain_tree(vol.mnt) == expected


def test_directories_with_stored_tweaks_are_removed_and_replaced(vol: Mount) -> None:
    build(vol.mnt)
    os.rename(vol.mnt / "moving", vol.mnt / "moved")  # now stores its tweak
    (vol.mnt / "empty").mkdir()
    os.rename(vol.mnt / "empty", vol.mnt / "empty2")  # an empty directory holding only its tweak
    os.rmdir(vol.mnt / "empty2")
    assert not (vol.mnt / "empty2").exists()
    (vol.mnt / "target").mkdir()
    os.rename(vol.mnt / "target", vol.mnt / "target2")
    os.rename(vol.mnt / "moved" / "sub", vol.mnt / "target2")  # over an empty directory with a stored tweak
    assert (vol.mnt / "target2" / "f").read_text() == "moved with its directory"
    try:
        os.rmdir(vol.mnt / "target2")
        raise AssertionError("rmdir of a non-empty directory succeeded")
    except OSError as e:
        assert e.errno == 39  # ENOTEMPTY, and the tweak is still there
    assert (vol.mnt / "target2" / "f").read_text() == "moved with its directory"
    expected = plain_tree(vol.mnt)
    vol.stop()
    assert spec.read_tree(vol.lower, PASSPHRASE) == expected


def test_version_1_volumes_keep_a_stored_tweak_in_every_directory(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().as_version(1).start()
    try:
        build(m.mnt)
        expected = plain_tree(m.mnt)
        lower_dirs = {str(p.relative_to(m.lower)) for p in m.lower.rglob("*") if p.is_dir()} | {"."}
        assert stored_tweaks(m.lower) == lower_dirs and len(lower_dirs) == 7
    finally:
        m.stop()
    assert json.loads((m.lower / config.CONFIG).read_text())["version"] == 1
    assert spec.read_tree(m.lower, PASSPHRASE) == expected
