"""Whole numbers from request text, in ASCII digits only.

``str.isdigit()`` is true for "²", "٣" and fullwidth digits, ``int()`` and ``float()`` take most
of them, and ``\\d`` in a ``re`` pattern matches them all: a check with one and a parse with
another let such text through to a 500, or silently read "v２" as version 2.  Every number a
request carries is read here or with ``DIGITS``.
"""

from __future__ import annotations

import re

DIGITS = r"[0-9]"  # for patterns: never \d


def is_digits(text: str) -> bool:
    """``text`` is one or more ASCII digits and nothing else."""
    return text.isascii() and text.isdigit()


def whole(text: str, low: int = 0, high: int = 2**63 - 1, max_len: int = 19) -> int | None:
    """The value of ``text`` if it is ASCII digits (at most ``max_len``) from ``low`` to
    ``high``, else None."""
    if len(text) > max_len or not is_digits(text):
        return None
    value = int(text)
    return value if low <= value <= high else None


def integer(text: str, low: int, high: int, max_len: int = 19) -> int | None:
    """``whole`` that also takes a leading "-"."""
    if text.startswith("-"):
        value = whole(text[1:], 0, 2**63, max_len)
        value = None if value is None else -value
    else:
        value = whole(text, 0, 2**63 - 1, max_len)
    return value if value is not None and low <= value <= high else None


def ascii_pattern(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """A compiled pattern whose \\d, \\w and \\s are ASCII only."""
    return re.compile(pattern, flags | re.ASCII)
