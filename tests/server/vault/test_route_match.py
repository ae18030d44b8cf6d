"""The Vault route table's one-expression matcher (VaultEngine.match) finds what walking the
table in order finds: the same route, the same captured parts, the same 404 and 405."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strongroom.server.vault.errors import Missing
from strongroom.server.vault.http import MethodNotAllowed, UnsupportedPath, VaultEngine

pytestmark = pytest.mark.unit

ENGINE = VaultEngine(SimpleNamespace(clock=lambda: 0.0))  # type: ignore[arg-type]
METHODS = sorted({r.method for r in ENGINE.routes} | {"PUT"})


def _walk(method: str, path: str) -> Any:
    """The table walked in order: the reference."""
    allowed = False
    for i, route in enumerate(ENGINE.routes):
        m = route.pattern.match(path)
        if m is None:
            continue
        if route.method == method:
            return i, {k: v for k, v in m.groupdict().items() if v is not None}
        allowed = True
    return "405" if allowed else "404"


def _fast(method: str, path: str) -> Any:
    try:
        return ENGINE.match(method, path)
    except MethodNotAllowed:
        return "405"
    except (Missing, UnsupportedPath):
        return "404"


_segment = st.sampled_from(["", "a", "x y", "é", "{name}", "..", "data", "keys", "metadata", "config"]) | st.text(max_size=6)


def _fill(template: str, fillers: list[str]) -> str:
    out = []
    for part in template.split("/"):
        out.append(fillers.pop() if part.startswith("{") and fillers else part)
    return "/".join(out)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(METHODS),
    st.sampled_from([r.template for r in ENGINE.routes]),
    st.lists(_segment, min_size=3, max_size=3),
    st.lists(_segment, max_size=3),
)
def test_the_matcher_agrees_with_the_walk(method: str, template: str, fillers: list[str], tail: list[str]) -> None:
    path = "/".join([_fill(template, fillers), *tail]) if tail else _fill(template, fillers)
    assert _fast(method, path) == _walk(method, path)


@pytest.mark.parametrize("route", range(len(ENGINE.routes)))
def test_each_route_is_found_by_its_own_path(route: int) -> None:
    r = ENGINE.routes[route]
    path = _fill(r.template, ["p3", "p2", "p1"])
    assert _fast(r.method, path) == _walk(r.method, path)
    assert _fast(r.method, path)[0] <= route  # itself, or an earlier route of the same method that takes the path
