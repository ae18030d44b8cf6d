"""Row types and their tables are declared once: a SELECT list is derived from the row type and
checked against the table definition."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from strongroom.server import schema, storage

pytestmark = pytest.mark.unit


def test_a_row_type_lists_its_fields_as_columns() -> None:
    @dataclass
    class Row:
        id: str
        name: str

    assert storage.columns_of(Row, schema.clients) == "id, name"


def test_a_field_the_table_lacks_is_refused_at_import() -> None:
    @dataclass
    class Drifted:
        id: str
        nickname: str

    with pytest.raises(RuntimeError, match="nickname"):
        storage.columns_of(Drifted, schema.clients)
