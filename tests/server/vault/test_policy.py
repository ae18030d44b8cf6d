"""Vault ACL policies: parsing HCL and JSON, matching with '+' and '*', Vault's precedence."""

from __future__ import annotations

import pytest

from strongroom.server.vault import durations
from strongroom.server.vault import policy as pol
from strongroom.server.vault.errors import Invalid

pytestmark = pytest.mark.unit

APP = """
# the app's own secrets
path "secret/data/app/*" {
  capabilities = ["create", "read", "update"]
}
path "secret/data/app/locked" { capabilities = ["deny"] }
path "secret/metadata/+/list" { capabilities = ["list"] }  // one segment
path "transit/encrypt/app" { capabilities = ["update"] }
"""


def test_hcl_and_json_give_the_same_rules() -> None:
    hcl = pol.parse(APP)
    as_json = pol.parse(
        '{"path": {"secret/data/app/*": {"capabilities": ["create", "read", "update"]},'
        ' "secret/data/app/locked": {"capabilities": ["deny"]},'
        ' "secret/metadata/+/list": {"capabilities": ["list"]},'
        ' "transit/encrypt/app": {"capabilities": ["update"]}}}'
    )
    assert sorted(hcl, key=lambda r: r.pattern) == sorted(as_json, key=lambda r: r.pattern)


@pytest.mark.parametrize(
    ("path", "caps"),
    [
        ("secret/data/app/db", {"create", "read", "update"}),
        ("secret/data/app/a/b", {"create", "read", "update"}),
        ("secret/data/app/locked", set()),  # deny at the most specific match takes all away
        ("secret/data/app", set()),  # the glob needs the slash
        ("secret/data/other", set()),
        ("secret/metadata/x/list", {"list"}),
        ("secret/metadata/x/y/list", set()),  # '+' is exactly one segment
        ("secret/metadata//list", set()),  # ... and not an empty one
        ("transit/encrypt/app", {"update"}),
        ("transit/encrypt/app2", set()),  # exact, not a prefix
    ],
)
def test_capabilities_follow_the_most_specific_match(path: str, caps: set[str]) -> None:
    assert pol.Acl([pol.parse(APP)]).capabilities(path) == caps


def test_precedence_rules() -> None:
    acl = pol.Acl(
        [
            pol.parse(
                'path "secret/*" { capabilities = ["read"] }\n'
                'path "secret/data/*" { capabilities = ["list"] }\n'
                'path "secret/+/x" { capabilities = ["update"] }\n'
                'path "secret/data/x" { capabilities = ["delete"] }\n'
            )
        ]
    )
    assert acl.capabilities("secret/data/x") == {"delete"}  # exact beats every wildcard
    assert acl.capabilities("secret/meta/x") == {"update"}  # '+' later than the other glob's '*'
    assert acl.capabilities("secret/data/y") == {"list"}  # the longer prefix glob
    assert acl.capabilities("secret/other") == {"read"}


def test_policies_merge_on_one_pattern_and_root_allows_all() -> None:
    a = pol.parse('path "secret/data/x" { capabilities = ["read"] }')
    b = pol.parse('path "secret/data/x" { capabilities = ["update"] }')
    assert pol.Acl([a, b]).capabilities("secret/data/x") == {"read", "update"}
    assert pol.Acl([], root=True).allows("anything/at/all", "sudo")
    assert pol.Acl([pol.DEFAULT_RULES]).allows("auth/token/lookup-self", "read")
    assert not pol.Acl([pol.DEFAULT_RULES]).allows("secret/data/x", "read")


@pytest.mark.parametrize(
    "text",
    [
        'path "x" { capabilities = ["fly"] }',  # unknown capability
        'path "x" { policy = "write" }',  # the old form: not supported, said so
        'path "a*b" { capabilities = ["read"] }',  # '*' inside a path
        'garbage path "x" { capabilities = ["read"] }',
        '{"path": []}',
        "{not json",
        'path "x" { capabilities = ["read"] } trailing',
        "x" * (pol.MAX_POLICY_BYTES + 1),
    ],
)
def test_bad_policies_are_refused(text: str) -> None:
    with pytest.raises(pol.PolicyError):
        pol.parse(text)


@pytest.mark.parametrize(
    ("text", "seconds"), [("", 0), (0, 0), ("90", 90), ("90s", 90), ("1h30m", 5400), ("768h", 2764800), (60, 60)]
)
def test_durations(text: object, seconds: int) -> None:
    assert durations.seconds(text, "ttl") == seconds


@pytest.mark.parametrize("text", ["1x", "h", "-5", "1h 30m", True, [], 1.5, "99999999999"])
def test_bad_durations(text: object) -> None:
    with pytest.raises(Invalid):
        durations.seconds(text, "ttl")


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ('path "a" {' * 6000, "not closed"),  # 60 KiB of unclosed blocks: 1.8 s in the old scanner
        ('path "a" { capabilities = ["read"] }\npath "b" {', "not closed"),
        ('path "a" { capabilities = ["read"] } trailing', "unexpected text"),
        ('junk path "a" { capabilities = ["read"] }', "unexpected text"),
    ],
)
def test_policy_text_is_scanned_once(text: str, refusal: str) -> None:
    """Blocks are read one after another from where the last ended (the writer compiles policies,
    so a text that made the scanner go back over itself stalled every write)."""
    with pytest.raises(pol.PolicyError, match=refusal):
        pol.parse(text)
