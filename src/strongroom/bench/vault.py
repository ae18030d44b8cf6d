"""The Vault-compatible API side by side with OpenBao: the same wrk load generator and the same
requests (KV v2 read and write, transit encrypt and decrypt of 32 bytes, a 1,000-item batch
encrypt) at 16 connections, both over TLS with their audit on, each round's order changed
(load.round_order); Strongroom's rate over OpenBao's per round, and each one's p99."""

from __future__ import annotations

import base64
import json
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strongroom.bench import load, peers
from strongroom.bench.keyserver import Strongroom
from strongroom.bench.procs import tree

PLAIN32 = base64.b64encode(b"k" * 32).decode()
OPS = ("kv read", "kv write", "transit encrypt 32 B", "transit decrypt 32 B", "transit batch encrypt 1000")


def _requests(ciphertext: str) -> dict[str, tuple[str, str, str]]:
    return {
        "kv read": ("GET", "/v1/secret/data/bench", ""),
        "kv write": ("POST", "/v1/secret/data/bench-write", json.dumps({"data": {"v": "k" * 32}})),
        "transit encrypt 32 B": ("POST", "/v1/transit/encrypt/bench", json.dumps({"plaintext": PLAIN32})),
        "transit decrypt 32 B": ("POST", "/v1/transit/decrypt/bench", json.dumps({"ciphertext": ciphertext})),
        "transit batch encrypt 1000": (
            "POST",
            "/v1/transit/encrypt/bench",
            json.dumps({"batch_input": [{"plaintext": PLAIN32}] * 1000}),
        ),
    }


class _Target:
    def __init__(self, name: str, url: str, token: str, pids: Callable[[], list[int]], http: Any) -> None:
        self.name, self.url, self.token, self.pids = name, url, token, pids
        headers = {"X-Vault-Token": token}
        http.post(url + "/v1/secret/data/bench", json={"data": {"v": "k" * 32}}, headers=headers).raise_for_status()
        http.post(url + "/v1/transit/keys/bench", json={}, headers=headers).raise_for_status()
        out = http.post(url + "/v1/transit/encrypt/bench", json={"plaintext": PLAIN32}, headers=headers)
        out.raise_for_status()
        self.requests = _requests(out.json()["data"]["ciphertext"])

    def drive(self, op: str, conns: int, seconds: float) -> load.LoadResult:
        method, path, body = self.requests[op]
        h = {"X-Vault-Token": self.token, "Content-Type": "application/json"}
        return load.run_wrk(f"{self.name} {op}", self.url, None, conns, seconds, self.pids(), h, method, path, body)


def run(
    rounds: int = 5,
    seconds: float = 3.0,
    conns: int = 16,
    workers: int = 2,
    progress: Callable[[str], None] = print,
    base_src: Path | None = None,
) -> list[dict[str, Any]]:
    """One row per operation: the paired median rate ratio (Strongroom / OpenBao), each system's
    median rate, p99 and errors.  With ``base_src`` (another build's sources) that build runs
    beside them in the same rounds, and each row also has its ratio to OpenBao and this build's
    rate over it ("after / before")."""
    import httpx

    if not load.wrk_available():
        raise RuntimeError("wrk is missing: install it with 'apt-get install wrk' (scripts/install.sh does)")
    bin_dir = peers.ensure_peers_venv()
    with tempfile.TemporaryDirectory(prefix="strongroom-vault-bench-", dir="/var/tmp") as tmp:
        root = Path(tmp)
        (root / "openbao").mkdir()
        s = Strongroom(root / "strongroom", workers=workers)
        before = None
        bao = None
        try:
            if base_src is not None:  # inside the try: a build that does not start must not leave this one running
                before = Strongroom(root / "before", workers=workers, src=base_src)
            bao = peers.OpenBao(root / "openbao", bin_dir)
            r = bao.http.post("/v1/sys/mounts/transit", json={"type": "transit"})
            if r.status_code >= 400 and "already in use" not in r.text:
                r.raise_for_status()
            token = s.client.vault_token(policies=["root"], ttl="24h")["client_token"]
            with httpx.Client(verify=str(s.data.ca_file), timeout=30) as ours_http:
                ours = _Target("strongroom", s.url, token, s.pids, ours_http)
            targets = [ours]
            if before is not None:
                before_token = before.client.vault_token(policies=["root"], ttl="24h")["client_token"]
                with httpx.Client(verify=str(before.data.ca_file), timeout=30) as before_http:
                    targets.append(_Target("before", before.url, before_token, before.pids, before_http))
            theirs = _Target("openbao", bao.url, bao.token, lambda: tree(bao.proc.pid), bao.http)  # type: ignore[union-attr]
            targets.append(theirs)
            rows = []
            for op in OPS:
                runs: dict[str, list[load.LoadResult]] = {t.name: [] for t in targets}
                for i in range(rounds):
                    for t in load.round_order(targets, i):
                        runs[t.name].append(t.drive(op, conns, seconds))
                ratios = [a.rate / b.rate for a, b in zip(runs["strongroom"], runs["openbao"], strict=True) if b.rate]
                med = {n: sorted(rs, key=lambda x: x.rate)[len(rs) // 2] for n, rs in runs.items()}
                row = {
                    "base": "OpenBao",
                    "phase": f"{op}, {conns} clients",
                    "rate vs OpenBao": statistics.median(ratios) if ratios else 0.0,
                    "lowest round": min(ratios, default=0.0),
                    "Strongroom req/s": float(med["strongroom"].rate),
                    "OpenBao req/s": float(med["openbao"].rate),
                    "Strongroom p99 ms": float(med["strongroom"].p99_ms),
                    "OpenBao p99 ms": float(med["openbao"].p99_ms),
                    "errors": int(sum(x.errors for rs in runs.values() for x in rs)),
                }
                if before is not None:
                    pairs = zip(runs["strongroom"], runs["before"], strict=True)
                    row["after / before"] = statistics.median(a.rate / b.rate for a, b in pairs if b.rate)
                    row["before vs OpenBao"] = statistics.median(
                        a.rate / b.rate for a, b in zip(runs["before"], runs["openbao"], strict=True) if b.rate
                    )
                rows.append(row)
                progress(
                    f"{op}: {row['rate vs OpenBao']:.2f}x OpenBao (rounds {', '.join(f'{x:.2f}' for x in ratios)}),"
                    f" {row['Strongroom req/s']:.0f} vs {row['OpenBao req/s']:.0f} req/s,"
                    f" p99 {row['Strongroom p99 ms']:.1f} vs {row['OpenBao p99 ms']:.1f} ms"
                )
            return rows
        finally:
            s.stop()
            if before is not None:
                before.stop()
            if bao is not None:
                bao.stop()
