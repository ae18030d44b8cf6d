"""Vault's durations, as Vault reads them (go-secure-stdlib's ParseDurationSecond): a JSON
number of seconds, a string of decimal seconds ("3600"), a whole number of days ("7d"), or Go's
``time.ParseDuration`` form ("90s", "1h30m", "1.5h", "300ms", "3600s0ns", "0") -- and nothing
else.  Java and Go clients send Go's form as their own libraries print it."""

from __future__ import annotations

from strongroom.server import numbers
from strongroom.server.vault.errors import Invalid

MAX_SECONDS = 10 * 365 * 86400
# Go's units, in nanoseconds (time.ParseDuration's table: "µ" U+00B5 and "μ" U+03BC both micro)
_UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DIGITS = frozenset("0123456789")
_GO_MAX_NS = 2**63 - 1  # time.Duration is an int64 of nanoseconds


def go_duration_ns(text: str) -> int:
    """Go's ``time.ParseDuration``: a possibly signed sequence of decimal numbers, each with an
    optional fraction and a unit; "0" alone needs none.  ValueError for anything else."""
    s = text
    neg = False
    if s[:1] in ("-", "+"):
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError("invalid duration")
    total = 0
    i = 0
    while i < len(s):
        start = i
        while i < len(s) and s[i] in _DIGITS:
            i += 1
        whole = s[start:i]
        frac = ""
        if i < len(s) and s[i] == ".":
            i += 1
            f0 = i
            while i < len(s) and s[i] in _DIGITS:
                i += 1
            frac = s[f0:i]
        if not whole and not frac:
            raise ValueError("invalid duration")
        u0 = i
        while i < len(s) and s[i] != "." and s[i] not in _DIGITS:
            i += 1
        unit = _UNIT_NS.get(s[u0:i])
        if unit is None:
            raise ValueError("missing or unknown unit in duration")
        value = int(whole or "0") * unit
        if frac:  # Go keeps the fraction's digits exactly, then truncates to nanoseconds
            value += int(frac) * unit // 10 ** len(frac)
        total += value
        if total > _GO_MAX_NS:
            raise ValueError("invalid duration")
    return -total if neg else total


def seconds(value: object, what: str) -> int:
    """Whole seconds (0 for "", 0 or null where a field allows it); Invalid for anything Vault
    refuses, and for a negative duration or one over ten years."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise Invalid(f"{what}: not a duration")
    if isinstance(value, int):
        out = value
    elif isinstance(value, float) and value.is_integer():
        out = int(value)  # a number with a fraction is refused, as Vault refuses "1.5" (no unit)
    elif isinstance(value, str):
        out = _text_seconds(value, what)
    else:
        raise Invalid(f"{what}: not a duration")
    if out < 0 or out > MAX_SECONDS:
        raise Invalid(f"{what}: out of range")
    return out


def _text_seconds(value: str, what: str) -> int:
    if value == "":
        return 0
    if numbers.is_digits(value) or value[:1] in "+-" and numbers.is_digits(value[1:]):
        if len(value) > 19:
            raise Invalid(f"{what}: out of range")
        return int(value)
    if value.endswith("d") and numbers.is_digits(value[:-1]) and len(value) <= 20:
        return int(value[:-1]) * 86400
    try:
        ns = go_duration_ns(value)
    except ValueError:
        raise Invalid(f"{what}: {value[:40]!r} is not a duration (use seconds, e.g. 3600, or Go's form, e.g. 1h30m)") from None
    return int(ns / 1_000_000_000) if ns < 0 else ns // 1_000_000_000


def text(s: int) -> str:
    """A duration as Vault shows it in KV metadata ("0s", "1h0m0s")."""
    if s == 0:
        return "0s"
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    if m:
        return f"{m}m{sec}s"
    return f"{sec}s"
