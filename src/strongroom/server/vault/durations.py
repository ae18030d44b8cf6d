"""Vault's durations: an integer of seconds, or Go's form ("90s", "15m", "1h30m", "768h")."""

from __future__ import annotations

from strongroom.server import numbers
from strongroom.server.vault.errors import Invalid

_PART = numbers.ascii_pattern(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_SECONDS = 10 * 365 * 86400


def seconds(value: object, what: str) -> int:
    """Whole seconds (0 for "" or 0); Invalid for anything else or over ten years."""
    if isinstance(value, bool):
        raise Invalid(f"{what}: not a duration")
    if isinstance(value, int):
        out = value
    elif isinstance(value, float) and value.is_integer():
        out = int(value)
    elif isinstance(value, str):
        text = value.strip()
        if text == "":
            return 0
        if numbers.is_digits(text):
            out = int(text)
        else:
            pos, total = 0, 0.0
            for m in _PART.finditer(text):
                if m.start() != pos:
                    break
                total += float(m.group(1)) * _UNIT[m.group(2)]
                pos = m.end()
            if pos != len(text) or pos == 0:
                raise Invalid(f"{what}: {value[:40]!r} is not a duration (use seconds or e.g. 1h30m)")
            out = int(total)
    else:
        raise Invalid(f"{what}: not a duration")
    if out < 0 or out > MAX_SECONDS:
        raise Invalid(f"{what}: out of range")
    return out


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
