"""The barrier is the storage of what is sealed (issue 37, point 2): no module of the server but
barrier.py derives the unseal key, unwraps a key, or calls the repository's functions that read,
write or delete the sealed tables' rows.  Read from the sources, so that a new backend that steps
around the barrier fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import strongroom

pytestmark = pytest.mark.unit

SRC = Path(strongroom.__file__).parent
SERVER = SRC / "server"
SEALED_TABLES = r"(deposit_versions|master_keys|system_keys|transit_key_versions)"
# a statement that writes a sealed table, or reads the columns that hold sealed material
TOUCHES = re.compile(
    rf"(INSERT INTO|UPDATE|DELETE FROM)\s+{SEALED_TABLES}\b|SELECT[^\"]*\b(wrapped|wrapped_key|ciphertext)\b", re.S
)
ROWS = ("repository.py", "vault_rows.py")
KEY_CALLS = {("kdf", "passphrase_key"), ("aead", "unwrap_key"), ("aead", "wrap_key")}


def sealed_functions() -> set[str]:
    out = set()
    for name in ROWS:
        tree = ast.parse((SERVER / name).read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and TOUCHES.search(ast.unparse(node)):
                out.add(node.name)
    return out


def offenders(paths: list[Path], sealed: set[str], src: Path = SRC) -> list[str]:
    server = src / "server"
    found = []
    for path in paths:
        if path.name == "barrier.py" or (path.parent == server and path.name in ROWS):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith(("server.repository", "server.vault_rows")):
                found += [f"{path.name}: imports {a.name}" for a in node.names if a.name in sealed]
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
            name = node.func.attr
            where = f"{path.relative_to(src)}:{node.lineno}"
            if owner in ("repo", "repository", "vault_rows") and name in sealed:
                found.append(f"{where}: {owner}.{name}")
            if path.is_relative_to(server) and (owner, name) in KEY_CALLS:
                found.append(f"{where}: {owner}.{name}")
            if owner in ("barrier", "barrier_mod") and name in ("_unseal_key_for", "_master_aad", "_initialize"):
                found.append(f"{where}: {name}")
    return found


def test_the_sealed_tables_functions_are_found() -> None:
    sealed = sealed_functions()
    # the check is only as good as this list: the functions everyone knows hold sealed rows
    assert {"insert_version", "version", "master_key", "system_key", "delete_deposit", "delete_versions_below"} <= sealed
    assert {"transit_versions", "insert_transit_version", "delete_transit_key"} <= sealed
    assert "deposit" not in sealed and "client" not in sealed  # plain rows stay plain


def test_only_the_barrier_derives_unwraps_or_touches_sealed_rows() -> None:
    paths = sorted(SRC.rglob("*.py"))
    assert not offenders(paths, sealed_functions())


def test_the_check_sees_a_module_that_steps_around(tmp_path: Path) -> None:
    """The check must be able to fail: a backend written the old way is caught."""
    probe = tmp_path / "server" / "stray.py"
    probe.parent.mkdir()
    probe.write_text(
        "from strongroom.server import repository as repo\n"
        "from strongroom.crypto import aead\n"
        "def f(tx, u):\n"
        "    repo.delete_versions_below(tx, 1, 2)\n"
        "    return aead.unwrap_key(u, repo.master_key(tx, 1), b'')\n"
    )
    assert offenders([probe], sealed_functions(), src=tmp_path) == [
        "server/stray.py:4: repo.delete_versions_below",
        "server/stray.py:5: aead.unwrap_key",
        "server/stray.py:5: repo.master_key",
    ]
