from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Cheap Argon2id for tests only; the parameters used are stored with every key, so
# production defaults are unaffected.  Exported so server processes inherit it.
os.environ.setdefault("STRONGROOM_ARGON2_MEMORY_KIB", "8192")
os.environ.setdefault("STRONGROOM_ARGON2_ITERATIONS", "1")
# The host's own state (fs/acl_floor.py) in a directory of this run, not the machine's
os.environ.setdefault("STRONGROOM_STATE_DIR", tempfile.mkdtemp(prefix="strongroom-host-"))

from tests.pg import PgCluster  # noqa: E402
from tests.serverproc import Deployment  # noqa: E402

_db_names = itertools.count()


@pytest.fixture(scope="session")
def pg() -> Iterator[PgCluster]:
    cluster = PgCluster()
    yield cluster
    cluster.destroy()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    if request.param == "sqlite":
        return None  # the embedded default: a SQLite file in the data dir
    cluster: PgCluster = request.getfixturevalue("pg")
    return cluster.create_database(f"t{os.getpid()}_{next(_db_names)}")


@pytest.fixture
def deployment(tmp_path: Path, db_url: str | None) -> Iterator[Deployment]:
    d = Deployment(tmp_path, db_url)
    yield d
    d.close()


@pytest.fixture
def running(deployment: Deployment) -> Deployment:
    deployment.start()
    return deployment


@pytest.fixture
def pg_deployment(tmp_path: Path, pg: PgCluster) -> Iterator[Deployment]:
    d = Deployment(tmp_path, pg.create_database(f"t{os.getpid()}_{next(_db_names)}"))
    yield d
    d.close()
