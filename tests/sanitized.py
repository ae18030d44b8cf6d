"""A pytest plugin for tests/test_native_sanitized.py: points every loader of the compiled helpers
at the AddressSanitizer + UBSan builds in $STRONGROOM_TEST_SANITIZED_DIR before any test runs,
and fails the session at once if one of them did not load (a run that silently took the Python
paths would prove nothing).  Test-only: the product reads no such variable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    from strongroom.fs import fuseio, procid
    from strongroom.fs import native as fs_native
    from strongroom.rng import native as rng_native

    built = Path(os.environ["STRONGROOM_TEST_SANITIZED_DIR"])
    for module in (fs_native, procid, rng_native, fuseio):
        module.LIBRARY = built / module.LIBRARY.name
    for loader in (fs_native.lib, procid._lib, rng_native.lib, fuseio._lib):
        loader.cache_clear()  # type: ignore[attr-defined]
        if loader() is None:
            raise pytest.UsageError(f"{loader.__module__}: the sanitized helper did not load")
    procid._recheck.cache_clear()
