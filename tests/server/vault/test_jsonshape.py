"""The shape bound on Vault JSON: the text-count shortcut a KV read takes agrees with the full walk."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strongroom.server.vault import jsonshape
from strongroom.server.vault.errors import Invalid

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab,[]{}"\\'),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(alphabet="k,{", max_size=3), inner, max_size=4),
    max_leaves=30,
)


def _verdict(f: Any) -> bool:
    try:
        f()
    except Invalid:
        return False
    return True


@given(_json)
def test_the_text_shortcut_agrees_with_the_walk(value: Any) -> None:
    raw = json.dumps(value).encode()
    assert _verdict(lambda: jsonshape.check_text(raw, value, "x")) == _verdict(lambda: jsonshape.check(value, "x"))


@pytest.mark.parametrize("levels", [jsonshape.MAX_DEPTH - 1, jsonshape.MAX_DEPTH, jsonshape.MAX_DEPTH + 1])
def test_depth_at_the_bound(levels: int) -> None:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    raw = json.dumps(value).encode()
    ok = levels <= jsonshape.MAX_DEPTH
    assert _verdict(lambda: jsonshape.check_text(raw, value, "x")) is ok
    assert _verdict(lambda: jsonshape.check(value, "x")) is ok


@pytest.mark.parametrize("entries", [jsonshape.MAX_ENTRIES, jsonshape.MAX_ENTRIES + 1])
def test_width_at_the_bound(entries: int) -> None:
    value = {str(i): i for i in range(entries)}
    raw = json.dumps(value).encode()
    ok = entries <= jsonshape.MAX_ENTRIES
    assert _verdict(lambda: jsonshape.check_text(raw, value, "x")) is ok
