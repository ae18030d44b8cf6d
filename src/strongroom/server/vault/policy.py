"""Vault ACL policies: parsing (HCL's `path "P" { capabilities = [...] }` blocks, or the same as
JSON) and deciding what a set of policies allows on a path, with Vault's precedence rules.

Pure: no storage, no I/O.  The policies themselves are kept in the database (repository.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cmp_to_key

CAPABILITIES = frozenset({"create", "read", "update", "patch", "delete", "list", "sudo", "deny"})
MAX_POLICY_BYTES = 64 * 1024
MAX_PATHS = 1000
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RESERVED = frozenset({"root", "default"})

# Given to every token unless it asked for no default policy: what a token needs to manage itself.
DEFAULT_POLICY = """
path "auth/token/lookup-self" { capabilities = ["read"] }
path "auth/token/renew-self" { capabilities = ["update"] }
path "auth/token/revoke-self" { capabilities = ["update"] }
path "sys/capabilities-self" { capabilities = ["update"] }
path "sys/internal/ui/mounts" { capabilities = ["read"] }
path "sys/internal/ui/mounts/*" { capabilities = ["read"] }
"""


class PolicyError(ValueError):
    """A policy text that does not parse, or asks for something unknown."""


@dataclass(frozen=True)
class Rule:
    pattern: str
    capabilities: frozenset[str]

    @property
    def glob(self) -> bool:
        return self.pattern.endswith("*")

    def matches(self, path: str) -> bool:
        pat = self.pattern[:-1] if self.glob else self.pattern
        if "+" not in pat:
            return path.startswith(pat) if self.glob else path == pat
        # '+' stands for exactly one whole segment
        p_parts, parts = pat.split("/"), path.split("/")
        if self.glob:
            if len(parts) < len(p_parts):
                return False
            head = parts[: len(p_parts) - 1]
            last_p, rest = p_parts[-1], "/".join(parts[len(p_parts) - 1 :])
            return _segments_match(p_parts[:-1], head) and rest.startswith(last_p)
        return len(parts) == len(p_parts) and _segments_match(p_parts, parts)


def _segments_match(pattern: list[str], parts: list[str]) -> bool:
    return all(p == "+" and s != "" or p == s for p, s in zip(pattern, parts, strict=True))


def _first_wildcard(p: str) -> int:
    spots = [i for i in (p.find("+"), p.find("*")) if i >= 0]
    return min(spots) if spots else len(p) + 1


def _compare(a: str, b: str) -> int:
    """Vault's priority between two matching patterns: >0 when ``a`` wins."""
    fa, fb = _first_wildcard(a), _first_wildcard(b)
    if fa != fb:
        return 1 if fa > fb else -1
    ga, gb = a.endswith("*"), b.endswith("*")
    if ga != gb:
        return -1 if ga else 1
    pa, pb = a.count("+"), b.count("+")
    if pa != pb:
        return -1 if pa > pb else 1
    if len(a) != len(b):
        return 1 if len(a) > len(b) else -1
    return (a > b) - (a < b)


def _compare_rules(a: Rule, b: Rule) -> int:
    return _compare(a.pattern, b.pattern)


_HCL_HEAD = re.compile(r'path\s+"((?:[^"\\]|\\.)*)"\s*\{')
_SPACE = re.compile(r"\s*")
_HCL_CAPS = re.compile(r"capabilities\s*=\s*\[(.*?)\]", re.S)
_HCL_COMMENT = re.compile(r"(#|//)[^\n]*")


def _hcl_blocks(body: str) -> list[tuple[str, str]]:
    """The ``path "P" { ... }`` blocks of an HCL policy, in one pass: each block's head is
    matched where the last one ended and its body runs to the next "}", so no text is scanned
    twice (a regex searching for blocks anywhere took seconds on 64 KiB of unclosed ones, inside
    the single writer)."""
    out, at = [], _SPACE.match(body).end()  # type: ignore[union-attr]  # \s* always matches
    while at < len(body):
        m = _HCL_HEAD.match(body, at)
        if m is None:
            raise PolicyError(f"unexpected text in policy: {body[at : at + 40]!r}")
        close = body.find("}", m.end())
        if close < 0:
            raise PolicyError(f'path "{m.group(1)[:40]}": the block is not closed')
        out.append((m.group(1), body[m.end() : close]))
        at = _SPACE.match(body, close + 1).end()  # type: ignore[union-attr]
    return out


def parse(text: str) -> tuple[Rule, ...]:
    """The rules of a policy written in HCL or JSON; PolicyError if it is anything else."""
    if len(text.encode()) > MAX_POLICY_BYTES:
        raise PolicyError(f"policy is over {MAX_POLICY_BYTES} bytes")
    stripped = text.strip()
    rules: dict[str, set[str]] = {}
    if stripped.startswith("{"):
        try:
            doc = json.loads(stripped)
        except ValueError:
            raise PolicyError("policy is neither valid HCL nor valid JSON") from None
        paths = doc.get("path") if isinstance(doc, dict) else None
        if not isinstance(paths, dict):
            raise PolicyError('a JSON policy needs a "path" object')
        for pattern, body in paths.items():
            caps = body.get("capabilities") if isinstance(body, dict) else None
            if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
                raise PolicyError(f'path "{pattern}": capabilities must be a list of strings')
            rules.setdefault(pattern, set()).update(caps)
    else:
        for pattern, inner in _hcl_blocks(_HCL_COMMENT.sub("", stripped)):
            caps_m = _HCL_CAPS.search(inner)
            if caps_m is None or _HCL_CAPS.sub("", inner).strip():
                raise PolicyError(f'path "{pattern}": only capabilities = [...] is supported')
            caps = [c.strip().strip('"') for c in caps_m.group(1).split(",") if c.strip()]
            rules.setdefault(pattern, set()).update(caps)
    if len(rules) > MAX_PATHS:
        raise PolicyError(f"policy has over {MAX_PATHS} paths")
    out = []
    for pattern, caps in rules.items():
        unknown = caps - CAPABILITIES
        if unknown:
            raise PolicyError(f'path "{pattern}": unknown capability {sorted(unknown)[0]!r}')
        if "*" in pattern[:-1] or len(pattern) > 512:
            raise PolicyError(f'path "{pattern}": "*" may only end a path (and paths are at most 512 characters)')
        out.append(Rule(pattern.lstrip("/"), frozenset(caps)))
    return tuple(out)


class Acl:
    """What a token's policies allow: the capabilities of the highest-priority matching pattern,
    merged across policies; "deny" there takes everything away; the root policy allows all."""

    def __init__(self, policies: list[tuple[Rule, ...]], root: bool = False) -> None:
        self.root = root
        merged: dict[str, set[str]] = {}
        for rules in policies:
            for rule in rules:
                merged.setdefault(rule.pattern, set()).update(rule.capabilities)
        self.rules = [Rule(p, frozenset(c)) for p, c in merged.items()]

    def capabilities(self, path: str) -> frozenset[str]:
        if self.root:
            return CAPABILITIES - {"deny"}
        found = [r for r in self.rules if r.matches(path)]
        if not found:
            return frozenset()
        best = max(found, key=cmp_to_key(_compare_rules))
        return frozenset() if "deny" in best.capabilities else best.capabilities

    def allows(self, path: str, capability: str) -> bool:
        return capability in self.capabilities(path)


DEFAULT_RULES = parse(DEFAULT_POLICY)
