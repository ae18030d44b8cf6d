"""docs/API.md's compatibility table names every route of the Vault-compatible API's table and
no other: a route added without saying how it compares with OpenBao fails here."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from strongroom.server.vault.http import VaultEngine

pytestmark = pytest.mark.unit

API = Path(__file__).parents[3] / "docs" / "API.md"


def test_every_route_has_one_row_and_every_row_a_route() -> None:
    text = API.read_text()
    table = text[text.index("### Compatibility table") :]
    rows = re.findall(r"^\| `((?:GET|POST|PATCH|DELETE|LIST) [^`]+)` \| (\S.*?) \|$", table, re.M)
    documented = [r for r, _ in rows]
    engine = VaultEngine(SimpleNamespace(clock=lambda: 0.0))  # type: ignore[arg-type]
    served = [f"{r.method} {r.template}" for r in engine.routes]
    assert len(documented) == len(set(documented)), "a route has two rows"
    assert sorted(documented) == sorted(served)
    assert all(verdict.split(":")[0].split(" ")[0].rstrip(";,") in ("same", "differs", "own") for _, verdict in rows)
