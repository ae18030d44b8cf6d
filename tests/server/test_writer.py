"""The writer process: its channel's framing, its restart, its socket's privacy, and the fallback."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import stat
import time
from pathlib import Path

import pytest

from strongroom.client import NotFound, Unavailable
from strongroom.server import errors
from strongroom.server import messages as m
from strongroom.server.messages import Frames, WriterInternalError, failure, frame, raise_failure
from tests.serverproc import Deployment, ServerProcess


def _role_pids(server: ServerProcess, role: str) -> list[int]:
    out = []
    for pid in server.pids()[1:]:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == f"sr-{role}":
                out.append(pid)
        except FileNotFoundError:
            pass
    return out


def _listening_socket_path(pid: int) -> str:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8 and parts[6] in inodes and parts[7].endswith("writer.sock"):
            return parts[7]
    raise AssertionError("the writer has no listening socket")


# -- the channel's framing -----------------------------------------------------------------------
def test_frames_reassemble_across_any_split() -> None:
    msgs = [
        m.Call(1, "/v1/deposits/a", ("c", "n", 1), m.GetDeposit("a", None, None)),
        m.Call(2, "/p", ("c", "m", 2), m.PutDeposit("b", b"\0" * 5000, m.Policy(("client:x",), 1.5, None, 3))),
        m.Reply(3, False, failure(errors.Gone("gone"))),
        m.Call(4, "/v1/register", None, m.Register("o", b"d" * 32, "n", b"k" * 32, "127.0.0.1")),
    ]
    stream = b"".join(frame(m) for m in msgs)
    for cut in (1, 3, 4, 5, 17, len(stream) - 1):
        f = Frames(1 << 20)
        got = f.feed(stream[:cut]) + f.feed(stream[cut:])
        assert got == msgs
    f = Frames(1 << 20)
    assert [x for b in stream for x in f.feed(bytes([b]))] == msgs  # one byte at a time


def test_only_this_servers_messages_decode() -> None:
    with pytest.raises(ValueError, match="not a message"):
        m.decode((m.TAG, "system", ()))

    @dataclasses.dataclass
    class Stray:
        x: int

    with pytest.raises(ValueError, match="unmarshallable"):
        m.frame(m.Call(1, "/", None, Stray(1)))
    assert m.decode(m.encode(m.Stats())) == m.Stats()


def test_oversize_frame_is_refused_before_it_is_buffered() -> None:
    f = Frames(100)
    with pytest.raises(ValueError, match="over the limit"):
        f.feed(frame(b"x" * 200)[:8])


def test_errors_cross_the_channel_by_kind_without_internal_messages() -> None:
    with pytest.raises(errors.Gone, match="retrieval limit"):
        raise_failure(failure(errors.Gone("deposit has reached its retrieval limit")))
    with pytest.raises(errors.NotFound):
        raise_failure(failure(errors.NotFound("no such deposit")))
    secret_bearing = RuntimeError("row contained s3cr3t")
    reply = failure(secret_bearing)
    assert "s3cr3t" not in repr(reply)
    with pytest.raises(WriterInternalError) as e:
        raise_failure(reply)
    assert "s3cr3t" not in str(e.value)
    # A name that is not one of the API's error classes never picks a class: it is an ApiError
    # with the status and code sent (the Vault API's own errors cross this way).
    with pytest.raises(errors.ApiError) as api:
        raise_failure(m.Failure(True, "SystemExit", "not an API error class", 403, "denied"))
    assert type(api.value) is errors.ApiError and (api.value.status, api.value.code) == (403, "denied")
    from strongroom.server.vault.errors import Invalid, PermissionDenied

    with pytest.raises(errors.ApiError) as vault_invalid:  # a name the deposit API's errors also have
        raise_failure(failure(Invalid("bad")))
    assert (vault_invalid.value.status, vault_invalid.value.code) == (400, Invalid.code)
    with pytest.raises(errors.ApiError) as denied:
        raise_failure(failure(PermissionDenied()))
    assert (denied.value.status, denied.value.message) == (403, "permission denied")


# -- the process -------------------------------------------------------------------------------------
def test_a_killed_writer_is_replaced_and_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    d = Deployment(tmp_path, None)
    try:
        s = d.start(workers=2)
        c = d.register()
        assert c.put("before", b"acknowledged") == 1
        (writer,) = _role_pids(s, "writer")
        assert len(_role_pids(s, "worker")) == 2
        os.kill(writer, signal.SIGKILL)
        deadline = time.time() + 20
        while True:
            try:
                assert c.get("before") == b"acknowledged"
                break
            except Unavailable:  # while the supervisor starts another writer
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        (replacement,) = _role_pids(s, "writer")
        assert replacement != writer
        assert c.put("after", b"x") == 1 and c.get("after") == b"x"
        with pytest.raises(NotFound):
            c.get("never-put")
    finally:
        d.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to try the socket as another user")
def test_the_writer_socket_is_private_to_the_server_user(tmp_path: Path) -> None:
    d = Deployment(tmp_path, None)
    try:
        s = d.start()
        (writer,) = _role_pids(s, "writer")
        path = _listening_socket_path(writer)
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        pid = os.fork()
        if pid == 0:  # as nobody: the directory alone keeps us out
            code = 3
            try:
                os.setgid(65534)
                os.setuid(65534)
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(path)
                code = 1
            except PermissionError:
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        s.stop()
        assert not os.path.exists(os.path.dirname(path)), "the socket's directory is removed at stop"
    finally:
        d.close()
