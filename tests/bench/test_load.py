"""The benchmark's load generator: wrk output parsing, and a short real run against a server."""

from __future__ import annotations

from strongroom.bench import load
from tests.serverproc import Deployment

WRK_OUTPUT = """Running 2s test @ https://127.0.0.1:36451
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    16.64ms   10.30ms  80.53ms   83.53%
  Latency Distribution
     50%   16.64ms
     75%   20.00ms
     90%   25.10ms
     99%    1.32s
  2057 requests in 2.00s, 1.03MB read
  Non-2xx or 3xx responses: 3
  Socket errors: connect 0, read 1, write 2, timeout 0
Requests/sec:   1028.60
"""


def test_parse_wrk() -> None:
    r = load.parse_wrk(WRK_OUTPUT)
    assert r["p50"] == 16.64 and r["p90"] == 25.1 and r["p99"] == 1320.0
    assert r["requests"] == 2057 and r["rate"] == 1028.6 and r["errors"] == 6


def test_presigned_requests_replay_without_errors(running: Deployment) -> None:
    c = running.register()
    c.put("k", b"v" * 32)
    lines = load.presign(c, "GET", "/v1/deposits/k", b"", 3000)
    assert len(set(lines)) == 3000  # every request has its own nonce
    r = load.run_wrk("smoke", running.url, lines, 4, 1, running.servers[0].pids())
    assert r.requests > 10 and r.errors == 0
    assert c.list()[0]["retrievals"] >= r.requests  # the server really served them
