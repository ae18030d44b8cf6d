"""The shape of JSON a Vault request may carry (and a KV secret may hold): no deeper and no wider
than OpenBao takes, so nothing is stored that could not be read back; and no NUL in any text
that is stored or audited."""

from __future__ import annotations

from typing import Any

from strongroom.server.vault.errors import Invalid

MAX_DEPTH = 300  # OpenBao's max_request_json_depth default
MAX_ENTRIES = 10_000  # entries of one object or array (OpenBao's defaults for each)


def check(value: Any, what: str = "failed to parse JSON input") -> None:
    """Invalid for a value nested deeper than MAX_DEPTH, or with an object or array of more than
    MAX_ENTRIES entries (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict | list):
            if depth > MAX_DEPTH:
                raise Invalid(f"{what}: nested deeper than {MAX_DEPTH} levels")
            if len(v) > MAX_ENTRIES:
                raise Invalid(f"{what}: an object or array of more than {MAX_ENTRIES} entries")
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))


def check_text(raw: bytes, value: Any, what: str) -> None:
    """``check`` of ``value`` parsed from ``raw``, skipped when the text alone bounds it: nesting
    needs an opening bracket per level and entries a comma each, counted in C (this runs on every
    KV read, and almost every secret is far below both bounds)."""
    if raw.count(b"{") + raw.count(b"[") <= MAX_DEPTH and raw.count(b",") < MAX_ENTRIES:
        return
    check(value, what)


def no_nul(path: str, query: dict[str, str], body: Any) -> None:
    """Invalid when the path, a query parameter or any string of ``body`` (keys included) holds a
    NUL: PostgreSQL stores no NUL in text, and every such field is stored or audited."""
    if "\x00" in path or query and any("\x00" in k or "\x00" in v for k, v in query.items()):
        raise Invalid("the path and query may not contain NUL characters")
    if not body:
        return
    stack = [body]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if "\x00" in v:
                raise Invalid("text fields may not contain NUL characters")
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
