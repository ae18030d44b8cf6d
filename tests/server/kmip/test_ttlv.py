"""The TTLV tree codec and KMIP's numbers: every number in tags.py is PyKMIP's for the same
name; what PyKMIP encodes decodes and re-encodes to the same bytes; random trees round-trip;
protocol.parse refuses anything that is not a valid request with a Refusal, never another error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from strongroom.server.kmip import protocol
from strongroom.server.kmip import tags as t
from strongroom.server.kmip.ttlv import Item, Malformed, decode, encode

# our names for values of PyKMIP's enumerations (tags are checked by name, below)
ENUMS = {
    "Operation": {n[3:]: v for n, v in vars(t).items() if n.startswith("OP_")},
    "ResultStatus": {"SUCCESS": t.SUCCESS, "OPERATION_FAILED": t.OPERATION_FAILED},
    "ObjectType": {"CERTIFICATE": t.CERTIFICATE, "SYMMETRIC_KEY": t.SYMMETRIC_KEY_TYPE, "SECRET_DATA": t.SECRET_DATA_OBJECT,
                   "OPAQUE_DATA": t.OPAQUE_DATA_OBJECT},
    "State": {"PRE_ACTIVE": t.PRE_ACTIVE, "ACTIVE": t.ACTIVE, "DEACTIVATED": t.DEACTIVATED, "COMPROMISED": t.COMPROMISED,
              "DESTROYED": t.DESTROYED, "DESTROYED_COMPROMISED": t.DESTROYED_COMPROMISED},
    "KeyFormatType": {"RAW": t.RAW, "OPAQUE": t.OPAQUE, "TRANSPARENT_SYMMETRIC_KEY": t.TRANSPARENT_SYMMETRIC_KEY},
    "CryptographicAlgorithm": {"AES": t.AES},
    "BlockCipherMode": {"CBC": t.CBC, "ECB": t.ECB, "GCM": t.GCM},
    "PaddingMethod": {"NONE": t.PADDING_NONE, "PKCS5": t.PKCS5},
    "CryptographicUsageMask": {"ENCRYPT": t.USAGE_ENCRYPT, "DECRYPT": t.USAGE_DECRYPT},
    "NameType": {"UNINTERPRETED_TEXT_STRING": t.UNINTERPRETED_TEXT_STRING},
    "LinkType": {"REPLACEMENT_OBJECT_LINK": t.REPLACEMENT_OBJECT_LINK, "REPLACED_OBJECT_LINK": t.REPLACED_OBJECT_LINK},
    "RevocationReasonCode": {"KEY_COMPROMISE": t.KEY_COMPROMISE},
    "QueryFunction": {"QUERY_OPERATIONS": t.QUERY_OPERATIONS, "QUERY_OBJECTS": t.QUERY_OBJECTS,
                      "QUERY_SERVER_INFORMATION": t.QUERY_SERVER_INFORMATION},
    "BatchErrorContinuationOption": {"CONTINUE": t.BATCH_CONTINUE, "STOP": t.BATCH_STOP, "UNDO": t.BATCH_UNDO},
}  # fmt: skip
REASONS = ["ITEM_NOT_FOUND", "RESPONSE_TOO_LARGE", "AUTHENTICATION_NOT_SUCCESSFUL", "INVALID_MESSAGE", "OPERATION_NOT_SUPPORTED",
           "MISSING_DATA", "INVALID_FIELD", "FEATURE_NOT_SUPPORTED", "CRYPTOGRAPHIC_FAILURE", "ILLEGAL_OPERATION",
           "PERMISSION_DENIED", "INDEX_OUT_OF_BOUNDS", "KEY_FORMAT_TYPE_NOT_SUPPORTED", "GENERAL_FAILURE"]  # fmt: skip


def test_every_number_is_pykmips() -> None:
    from kmip.core import enums

    tags = {n: v for n, v in vars(t).items() if n.isupper() and isinstance(v, int) and v >= 0x420000}
    assert len(tags) > 90
    for name, value in tags.items():
        assert enums.Tags[name].value == value, name
    for enum_name, members in ENUMS.items():
        for name, value in members.items():
            assert getattr(enums, enum_name)[name].value == value, (enum_name, name)
    for name in REASONS:
        assert enums.ResultReason[name].value == getattr(t, name), name
    names = ("STRUCTURE", "INTEGER", "LONG_INTEGER", "BIG_INTEGER", "ENUMERATION", "BOOLEAN", "TEXT_STRING", "BYTE_STRING")
    ours = [t.STRUCTURE, t.INTEGER, t.LONG, t.BIG, t.ENUM, t.BOOL, t.TEXT, t.BYTES]
    assert ours == [enums.Types[n].value for n in names]
    assert [enums.Types.DATE_TIME.value, enums.Types.INTERVAL.value] == [t.DATETIME, t.INTERVAL]


def test_what_pykmip_encodes_round_trips() -> None:
    from kmip.core import enums, utils
    from kmip.core.factories.attributes import AttributeFactory
    from kmip.core.messages import contents, messages, payloads
    from kmip.core.objects import TemplateAttribute

    f = AttributeFactory()
    template = TemplateAttribute(attributes=[
        f.create_attribute(enums.AttributeType.CRYPTOGRAPHIC_ALGORITHM, enums.CryptographicAlgorithm.AES),
        f.create_attribute(enums.AttributeType.CRYPTOGRAPHIC_LENGTH, 256),
        f.create_attribute(enums.AttributeType.NAME, "k"),
        f.create_attribute(enums.AttributeType.ACTIVATION_DATE, 1_700_000_000),
    ])  # fmt: skip
    payload = payloads.CreateRequestPayload(enums.ObjectType.SYMMETRIC_KEY, template)
    header = messages.RequestHeader(protocol_version=contents.ProtocolVersion(1, 2), batch_count=contents.BatchCount(1))
    batch = messages.RequestBatchItem(operation=contents.Operation(enums.Operation.CREATE), request_payload=payload)
    stream = utils.BytearrayStream()
    messages.RequestMessage(request_header=header, batch_items=[batch]).write(stream)
    raw = bytes(stream.buffer)
    assert encode(decode(raw)) == raw
    req = protocol.parse(raw)
    assert (req.major, req.minor, req.keep_going) == (1, 2, False) and req.items[0][0] == t.OP_CREATE


leaves = hs.one_of(
    hs.builds(Item, hs.just(0x420001), hs.just(t.INTEGER), hs.integers(-(2**31), 2**31 - 1)),
    hs.builds(Item, hs.just(0x420002), hs.just(t.LONG), hs.integers(-(2**63), 2**63 - 1)),
    hs.builds(Item, hs.just(0x420003), hs.just(t.ENUM), hs.integers(0, 2**32 - 1)),
    hs.builds(Item, hs.just(0x420004), hs.just(t.BOOL), hs.booleans()),
    hs.builds(Item, hs.just(0x420005), hs.just(t.TEXT), hs.text(max_size=30)),
    hs.builds(Item, hs.just(0x420006), hs.just(t.BYTES), hs.binary(max_size=30)),
    hs.builds(Item, hs.just(0x420007), hs.just(t.DATETIME), hs.integers(-(2**63), 2**63 - 1)),
    hs.builds(Item, hs.just(0x420008), hs.just(t.INTERVAL), hs.integers(0, 2**32 - 1)),
)
trees = hs.recursive(leaves, lambda kids: hs.builds(Item, hs.just(0x420009), hs.just(t.STRUCTURE), hs.lists(kids, max_size=4)))


@settings(max_examples=300, deadline=None)
@given(trees)
def test_random_trees_round_trip(item: Item) -> None:
    raw = encode(item)
    assert len(raw) % 8 == 0
    assert decode(raw) == item


@settings(max_examples=300, deadline=None)
@given(trees, hs.integers(0, 10_000), hs.integers(0, 255), hs.integers(0, 16))
def test_parse_refuses_with_a_refusal_only(item: Item, where: int, byte: int, cut: int) -> None:
    raw = bytearray(encode(Item(t.REQUEST_MESSAGE, t.STRUCTURE, [item])))
    raw[where % len(raw)] = byte
    del raw[len(raw) - cut :]  # and a tail cut off (frames.py would have refused it; the decoder stands alone)
    try:
        protocol.parse(bytes(raw))
    except protocol.Refusal:
        pass
    except Malformed as e:  # pragma: no cover - the assertion says what leaked
        pytest.fail(f"Malformed leaked: {e}")
