"""Model-based test: random sequences of operations run on a real mount and on a plain directory
must give the same results, errors and final trees (hypothesis stateful)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tests.fs.mounts import Mount

NAMES = st.sampled_from(["a", "b", "c", "d/x", "d/y", "e" * 180])
DATA = st.binary(min_size=0, max_size=3 * 4096 + 7)
OFFSETS = st.integers(min_value=0, max_value=5 * 4096)

_state: dict[str, Mount] = {}  # one mount for every example, started by the first (not at import)


def _the_mount() -> Mount:
    if "m" not in _state:
        _state["m"] = Mount(Path(tempfile.mkdtemp(prefix="strongroom-model-"))).init().start()
    return _state["m"]


def _outcome(fn, *args):  # type: ignore[no-untyped-def]
    try:
        return ("ok", fn(*args))
    except OSError as e:
        return ("error", e.errno)


class SameAsPlainDirectory(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.n = getattr(SameAsPlainDirectory, "_count", 0)
        SameAsPlainDirectory._count = self.n + 1  # type: ignore[attr-defined]
        m = _the_mount()
        self.enc = m.mnt / f"case{self.n}"
        self.plain = m.lower.parent / f"plain{self.n}"
        for base in (self.enc, self.plain):
            (base / "d").mkdir(parents=True)

    def both(self, fn, *args):  # type: ignore[no-untyped-def]
        a = _outcome(fn, self.enc, *args)
        b = _outcome(fn, self.plain, *args)
        assert a == b, (fn.__name__, args, a, b)

    @rule(name=NAMES, data=DATA)
    def write_file(self, name: str, data: bytes) -> None:
        self.both(lambda base, n, d: (base / n).write_bytes(d), name, data)

    @rule(name=NAMES, offset=OFFSETS, data=DATA)
    def pwrite(self, name: str, offset: int, data: bytes) -> None:
        def op(base: Path, n: str, off: int, d: bytes) -> int:
            fd = os.open(base / n, os.O_RDWR)
            try:
                return os.pwrite(fd, d, off)
            finally:
                os.close(fd)

        self.both(op, name, offset, data)

    @rule(name=NAMES, length=OFFSETS)
    def truncate(self, name: str, length: int) -> None:
        self.both(lambda base, n, ln: os.truncate(base / n, ln), name, length)

    @rule(name=NAMES, offset=OFFSETS, size=st.integers(0, 9000))
    def pread(self, name: str, offset: int, size: int) -> None:
        def op(base: Path, n: str, off: int, sz: int) -> bytes:
            fd = os.open(base / n, os.O_RDONLY)
            try:
                return os.pread(fd, sz, off)
            finally:
                os.close(fd)

        self.both(op, name, offset, size)

    @rule(src=NAMES, dst=NAMES)
    def rename(self, src: str, dst: str) -> None:
        self.both(lambda base, s, d: os.rename(base / s, base / d), src, dst)

    @rule(name=NAMES)
    def unlink(self, name: str) -> None:
        self.both(lambda base, n: os.unlink(base / n), name)

    @rule(name=NAMES)
    def append(self, name: str) -> None:
        def op(base: Path, n: str) -> int:
            with open(base / n, "ab") as f:
                return f.write(b"+" * 5000)

        self.both(op, name)

    @invariant()
    def same_tree(self) -> None:
        def tree(base: Path) -> dict[str, bytes | None]:
            return {str(p.relative_to(base)): (p.read_bytes() if p.is_file() else None) for p in sorted(base.rglob("*"))}

        assert tree(self.enc) == tree(self.plain)

    def teardown(self) -> None:
        shutil.rmtree(self.enc)
        shutil.rmtree(self.plain)


TestModel = SameAsPlainDirectory.TestCase
TestModel.settings = settings(max_examples=30, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck))


def teardown_module() -> None:
    if "m" in _state:
        m = _state.pop("m")
        m.stop()
        shutil.rmtree(m.lower.parent, ignore_errors=True)
