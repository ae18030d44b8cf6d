"""KMIP attributes: the ones this server knows (by KMIP 1.x name and by 2.0 tag), read from a
request in either form (1.x ``Attribute`` structures, 2.0 tagged items in ``Attributes``) and
written back in the form of the request's protocol version.

An object's attributes are kept as a list of (name, value) where the value is the attribute's
TTLV item under the ATTRIBUTE_VALUE tag, encoded: one form for every type, compared byte for
byte by Locate, retagged on the way out."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from strongroom.server.kmip import tags as t
from strongroom.server.kmip.ttlv import Item, Malformed, decode, encode, s, txt


@dataclass(frozen=True)
class Spec:
    tag: int
    kind: int
    multi: bool = False
    client_sets: bool = True  # False: the server sets it (a client's value is refused)
    modifiable: bool = True  # False: a client may give it at creation, not change it after
    deletable: bool = True  # False: once there, it stays


SPECS: dict[str, Spec] = {
    "Unique Identifier": Spec(t.UNIQUE_IDENTIFIER, t.TEXT, client_sets=False),
    "Name": Spec(t.NAME, t.STRUCTURE, multi=True),
    "Object Type": Spec(t.OBJECT_TYPE, t.ENUM, client_sets=False),
    "Cryptographic Algorithm": Spec(t.CRYPTOGRAPHIC_ALGORITHM, t.ENUM, modifiable=False, deletable=False),
    "Cryptographic Length": Spec(t.CRYPTOGRAPHIC_LENGTH, t.INTEGER, modifiable=False, deletable=False),
    "Cryptographic Parameters": Spec(t.CRYPTOGRAPHIC_PARAMETERS, t.STRUCTURE, multi=True),
    "Cryptographic Usage Mask": Spec(t.CRYPTOGRAPHIC_USAGE_MASK, t.INTEGER),
    "State": Spec(t.STATE, t.ENUM, client_sets=False),
    "Initial Date": Spec(t.INITIAL_DATE, t.DATETIME, client_sets=False),
    "Activation Date": Spec(t.ACTIVATION_DATE, t.DATETIME),
    "Deactivation Date": Spec(t.DEACTIVATION_DATE, t.DATETIME),
    "Process Start Date": Spec(t.PROCESS_START_DATE, t.DATETIME),
    "Protect Stop Date": Spec(t.PROTECT_STOP_DATE, t.DATETIME),
    "Destroy Date": Spec(t.DESTROY_DATE, t.DATETIME, client_sets=False),
    "Compromise Date": Spec(t.COMPROMISE_DATE, t.DATETIME, client_sets=False),
    "Compromise Occurrence Date": Spec(t.COMPROMISE_OCCURRENCE_DATE, t.DATETIME, client_sets=False),
    "Last Change Date": Spec(t.LAST_CHANGE_DATE, t.DATETIME, client_sets=False),
    "Revocation Reason": Spec(t.REVOCATION_REASON, t.STRUCTURE, client_sets=False),
    "Object Group": Spec(t.OBJECT_GROUP, t.TEXT, multi=True),
    "Link": Spec(t.LINK, t.STRUCTURE, multi=True),
    "Application Specific Information": Spec(t.APPLICATION_SPECIFIC_INFORMATION, t.STRUCTURE, multi=True),
    "Contact Information": Spec(t.CONTACT_INFORMATION, t.TEXT),
    "Operation Policy Name": Spec(t.OPERATION_POLICY_NAME, t.TEXT),
    "Sensitive": Spec(t.SENSITIVE, t.BOOL, deletable=False),
    "Extractable": Spec(t.EXTRACTABLE, t.BOOL, deletable=False),
}
BY_TAG = {spec.tag: name for name, spec in SPECS.items()}
MAX_ATTRIBUTES = 256  # per object
MAX_VALUE = 4096  # encoded bytes per value


class AttributeError_(ValueError):
    """A refused attribute: ``reason`` is the KMIP result reason."""

    def __init__(self, reason: int, message: str) -> None:
        super().__init__(message)
        self.reason = reason


Attr = tuple[str, bytes]  # (name, the value item under ATTRIBUTE_VALUE, encoded)


def _custom(name: str) -> bool:
    return name[:2] in ("x-", "y-", "X-", "Y-") and 2 < len(name) <= 128 and name.isprintable()


def spec_of(name: str) -> Spec | None:
    return SPECS.get(name)


def value_of(name: str, item: Item, private: bool = False) -> Attr:
    """``item`` (any tag) as the stored value of attribute ``name``, its type checked (a
    ``private`` one is the server's own, never shown: its name starts with "_")."""
    spec = SPECS.get(name)
    if private != name.startswith("_") or (spec is None and not private and not _custom(name)):
        raise AttributeError_(t.INVALID_FIELD, f"attribute {name[:80]!r} is not supported")
    if spec is not None and item.kind != spec.kind:
        raise AttributeError_(t.INVALID_FIELD, f"attribute {name!r} has the wrong type")
    raw = encode(Item(t.ATTRIBUTE_VALUE, item.kind, item.value))
    if len(raw) > MAX_VALUE:
        raise AttributeError_(t.INVALID_FIELD, f"attribute {name!r} is over {MAX_VALUE} bytes")
    return name, raw


@functools.lru_cache(maxsize=8192)
def _decoded(raw: bytes) -> Item:
    """A stored value decoded, once: objects are read far more often than changed (the items
    are shared, and never changed in place)."""
    return decode(raw)


def item_of(attr: Attr, tag: int) -> Item:
    value = _decoded(attr[1])
    return Item(tag, value.kind, value.value)


def from_v1(item: Item) -> Attr:
    """A 1.x ``Attribute`` structure (name, optional index, value)."""
    name = item.get(t.ATTRIBUTE_NAME, t.TEXT)
    value = item.find(t.ATTRIBUTE_VALUE)
    if name is None or value is None:
        raise AttributeError_(t.INVALID_FIELD, "an Attribute needs its name and value")
    return value_of(name, value)


def from_v2(item: Item) -> Attr:
    """One tagged 2.0 attribute item."""
    name = BY_TAG.get(item.tag)
    if name is None:
        raise AttributeError_(t.INVALID_FIELD, f"tag 0x{item.tag:06x} is not an attribute this server supports")
    return value_of(name, item)


def from_request(payload: Item) -> list[Attr]:
    """The attributes a Create, Register, ReKey or Locate payload carries, in either form."""
    out: list[Attr] = []
    holders = payload.all(t.TEMPLATE_ATTRIBUTE) + payload.all(t.ATTRIBUTES)
    out += [from_v1(a) for a in payload.all(t.ATTRIBUTE)]  # Locate in 1.x lists them directly
    for holder in holders:
        if holder.kind != t.STRUCTURE:
            raise Malformed("attributes must be a structure")
        if holder.tag == t.TEMPLATE_ATTRIBUTE:
            if holder.find(t.NAME) is not None:
                raise AttributeError_(t.ITEM_NOT_FOUND, "templates are not supported")
            out += [from_v1(a) for a in holder.all(t.ATTRIBUTE)]
        else:
            out += [from_v2(a) for a in holder.value]
    if len(out) > MAX_ATTRIBUTES:
        raise AttributeError_(t.INVALID_FIELD, f"more than {MAX_ATTRIBUTES} attributes")
    return out


def render(attrs: list[Attr], v2: bool) -> list[Item]:
    """Attributes as a response carries them: 1.x ``Attribute`` structures (with an index when
    an attribute has several values), or 2.0 tagged items."""
    if v2:
        return [item_of(a, SPECS[a[0]].tag) for a in attrs if a[0] in SPECS]
    seen: dict[str, int] = {}
    out = []
    for a in attrs:
        index = seen.get(a[0], 0)
        seen[a[0]] = index + 1
        parts = [txt(t.ATTRIBUTE_NAME, a[0])]
        if index:
            parts.append(Item(t.ATTRIBUTE_INDEX, t.INTEGER, index))
        parts.append(item_of(a, t.ATTRIBUTE_VALUE))
        out.append(s(t.ATTRIBUTE, *parts))
    return out


def name_reference(item: Item, v2: bool) -> str:
    """The attribute a GetAttributes / DeleteAttribute names: 1.x by text, 2.0 by reference
    (an enumeration of its tag, or a structure of vendor and name)."""
    if item.kind == t.TEXT:
        return str(item.value)
    if item.kind == t.STRUCTURE:
        name = item.get(t.ATTRIBUTE_NAME, t.TEXT)
        if name is not None:
            return str(name)
    if item.kind == t.ENUM and item.value | 0x420000 in BY_TAG:
        return BY_TAG[item.value | 0x420000]
    if item.kind == t.ENUM and item.value in BY_TAG:
        return BY_TAG[item.value]
    raise AttributeError_(t.INVALID_FIELD, "an attribute reference this server does not know")


def reference(name: str, v2: bool) -> Item:
    if v2:
        return Item(t.ATTRIBUTE_REFERENCE, t.ENUM, SPECS[name].tag)
    return txt(t.ATTRIBUTE_NAME, name)


def first(attrs: list[Attr], name: str) -> Item | None:
    for a in attrs:
        if a[0] == name:
            return _decoded(a[1])
    return None


def replace(attrs: list[Attr], name: str, value: Item | None) -> list[Attr]:
    """``attrs`` with every value of ``name`` dropped, then ``value`` (if any) added."""
    out = [a for a in attrs if a[0] != name]
    if value is not None:
        out.append(value_of(name, value))
    return out
