"""Whether another client's deposit exists must not show in how a refused get is answered (issue
37, point 12): the same error, and the same database work -- one statement finds the deposit and
decides its visibility, so a deposit that exists but is hidden costs no extra round trip (on
PostgreSQL a round trip is the 0.1-0.2 ms an outsider could time)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from strongroom.server import messages as m
from strongroom.server import storage
from strongroom.server.errors import NotFound
from tests.server.test_clock import Host, host  # noqa: F401 - the fixture

pytestmark = pytest.mark.unit


class Statements:
    """Counts the SQL statements the service sends through its transactions."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sql: list[str] = []
        for name in ("one", "all", "value", "run", "many"):
            original = getattr(storage.Tx, name)

            def counted(tx: Any, sql: str, *args: Any, _original: Any = original) -> Any:
                self.sql.append(sql)
                return _original(tx, sql, *args)

            monkeypatch.setattr(storage.Tx, name, counted)

    def during(self, fn: Any) -> tuple[list[str], BaseException | None]:
        self.sql.clear()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the error is compared
            return list(self.sql), e
        return list(self.sql), None


@pytest.fixture
def two(host: Host) -> Iterator[tuple[Host, Host]]:  # noqa: F811
    other = host.another("other")
    host.put("hidden", b"content")
    yield host, other


def test_a_hidden_deposit_and_a_missing_one_cost_the_same(two: tuple[Host, Host], monkeypatch: pytest.MonkeyPatch) -> None:
    owner, other = two
    count = Statements(monkeypatch)

    def get(name: str) -> None:
        req = other.request("GET", f"/v1/deposits/{name}")
        other.run(req, m.GetDeposit(name, owner.client_id, None))

    count.during(lambda: get("warm"))  # the signer's public key cached, as for every later request
    hidden, hidden_error = count.during(lambda: get("hidden"))
    missing, missing_error = count.during(lambda: get("missing"))
    assert isinstance(hidden_error, NotFound) and isinstance(missing_error, NotFound)
    assert hidden_error.message == missing_error.message
    assert len(hidden) == len(missing), (hidden, missing)
    assert hidden == missing  # the very same statements, in the same order
    # and the owner still reads it, through the same one statement
    assert owner.get("hidden") == b"content"
