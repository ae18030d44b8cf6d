"""results.json -> report.md and PNG charts (matplotlib, no display needed).

Each chart is drawn only from what the run measured; a suite that did not run, or a peer that
was missing, leaves its bars out and says so in report.md, never a placeholder value.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from strongroom.bench import bulk, entropy_configs, fs, rng

CHARTS = {
    "case_study": "case_study.png",
    "keyserver": "keyserver.png",
    "keygen": "keygen.png",
    "fs_throughput": "fs_throughput.png",
    "fs_small_files": "fs_small_files.png",
    "aesni": "aesni.png",
    "bulk": "bulk.png",
    "acl": "acl.png",
}


def keyserver_table(r: dict[str, Any]) -> str:
    lines = [
        "Strongroom and OpenBao run side by side: each operation on each in turn, round after round (order flipped"
        ' each round); a row is the system\'s median round, "rounds" every round\'s rate, and "vs OpenBao" the'
        " median of the per-round ratios (each round's pair ran back to back).",
        "",
        "| system | operation | clients | rate /s | p50 ms | p99 ms | errors | server cores | generator cores | rounds /s"
        " | vs OpenBao |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r.get("load", []):
        op = row.get("op") or row["label"].split(" ", 1)[1]
        rounds = ", ".join(f"{x:,.0f}" for x in row.get("rounds", []))
        ratio = ""
        if "vs_openbao" in row:
            ratio = f"**{row['vs_openbao']:.2f}×** ({', '.join(f'{x:.2f}' for x in row['vs_openbao_rounds'])})"
        lines.append(
            f"| {row['system']} | {op} | {row['connections']} | {row['rate']:,} | {row['p50_ms']} | {row['p99_ms']} | "
            f"{row['errors']} | {row.get('server_cpu', '')} | {row.get('generator_cpu', '')} | {rounds} | {ratio} |"
        )
    for row in r.get("registrations", []):
        lines.append(
            f"| {row['system']} | registrations ({row['seconds']} s) | {row['concurrency']} | {row['rate']:,} | | | | | | | |"
        )
    lat = r.get("latency_ms", {})
    if lat:
        ops = ["register", "put_32B", "get_32B", "entropy_1000B"]
        lines += ["", "| one operation, median ms | " + " | ".join(lat) + " |", "|---|" + "---|" * len(lat)]
        for op in ops:
            lines.append(f"| {op} | " + " | ".join(str(lat[s].get(op, "—")) for s in lat) + " |")
    mem = r.get("memory_mib", {})
    if mem:
        lines.append("\nmemory: " + ", ".join(f"{k} {v}" for k, v in mem.items()))
    lines += [f"MISSING: {m}" for m in r.get("missing", [])]
    return "\n".join(lines)


def _acl_label(row: dict[str, Any]) -> str:
    timeout = row.get("acl_timeout")
    if not row["rules"] or timeout is None:
        return f"{row['rules']} rules" + (" (second copy)" if row.get("copy") else "")
    return f"{row['rules']} rules, " + ("strict (--acl-timeout 0)" if timeout == 0 else f"--acl-timeout {timeout:g}")


def acl_table(r: dict[str, Any]) -> str:
    lines = ["| rules | µs per open+read+close (median) | vs no rules |", "|---|---|---|"]
    lines += [f"| {_acl_label(row)} | {row['us_per_open_read']} | {row['vs_no_rules']} |" for row in r["rows"]]
    if "no_rules_us" in r:
        lines.append(
            f"\nbaseline: the mean of the two no-rules copies, {r['no_rules_us']} µs "
            f"(they differ by {r['no_rules_spread'] * 100:.1f} %: this run's noise)"
        )
    lines.append(f"\n20 rules add <= 10 % (the mount's default --acl-timeout): {'met' if r.get('target_met') else 'MISSED'}")
    return "\n".join(lines)


TABLES: dict[str, Callable[[dict[str, Any]], str]] = {
    "keyserver": keyserver_table,
    "entropy": entropy_configs.table,
    "rng": rng.table,
    "fs": fs.table,
    "acl": acl_table,
    "bulk": bulk.table,
}

TITLES = {
    "keyserver": "Key server vs OpenBao and PyKMIP (16 and 1 clients, wrk)",
    "entropy": "The case study's entropy configurations (one client, as its script)",
    "rng": "Key generation and entropy sources vs a C getrandom(2) loop",
    "fs": "Filesystem vs a plain directory and gocryptfs, AES-NI on and off",
    "acl": "Process ACL cost",
    "bulk": "Bulk file encryption vs age, gpg and openssl",
}


# -- charts ----------------------------------------------------------------------------------------
def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _bars(
    path: Path,
    title: str,
    groups: list[str],
    series: dict[str, list[float | None]],
    ylabel: str,
    note: str = "",
    log: bool = False,
    horizontal: bool = False,
) -> None:
    """Grouped bars: one group per label in ``groups``, one bar per series; None leaves a gap."""
    plt = _plt()
    bars_per_group = max(1, len(series))
    if horizontal:
        size = (9.0, 1.2 + 0.32 * len(groups) * bars_per_group)
    else:
        size = (max(6.0, 1.3 * len(groups) * bars_per_group**0.5 + 2), 4.2)
    fig, ax = plt.subplots(figsize=size)
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + i * width - 0.4 + width / 2 for g in range(len(groups))]
        pairs = [(x, v) for x, v in zip(xs, values, strict=True) if v is not None]
        if not pairs:
            continue
        bx, bv = zip(*pairs, strict=True)
        bars = (ax.barh if horizontal else ax.bar)(bx, bv, width, label=name)
        ax.bar_label(bars, fmt=_label, fontsize=7, padding=2)
    if horizontal:
        ax.set_yticks(range(len(groups)), groups)
        ax.set_xlabel(ylabel)
        ax.invert_yaxis()
        if log:
            ax.set_xscale("log")
    else:
        ax.set_xticks(
            range(len(groups)), groups, rotation=0 if len(groups) < 6 else 20, ha="center" if len(groups) < 6 else "right"
        )
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    if len(series) > 1:
        ax.legend(fontsize=8)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="#555")
    fig.tight_layout(rect=(0, 0.04 if note else 0, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_charts(results: dict[str, Any], out: Path) -> list[str]:
    """Draws every chart the results allow; returns the file names written."""
    s = results.get("suites", {})
    made: list[str] = []

    def ok(name: str) -> dict[str, Any] | None:
        r = s.get(name)
        return r if isinstance(r, dict) and "error" not in r else None

    if (e := ok("entropy")) and e["rows"]:
        ops = [("register_ms", "register"), ("put_ms", "put"), ("get_ms", "get"), ("entropy_1000B_ms", "entropy 1000 B")]
        _bars(
            out / CHARTS["case_study"],
            f"Case study configurations on kernel {e['kernel']}: ms per operation, lower is better",
            [label for _, label in ops],
            {row["config"]: [row[k] for k, _ in ops] for row in e["rows"]},
            "ms (median)",
            note="one client, one operation at a time, as the zTrustee case study's script",
        )
        made.append(CHARTS["case_study"])
    if (k := ok("keyserver")) and k.get("load"):
        load_ops = ["get 32 B", "put 32 B", "entropy 1000 B"]
        systems = sorted({row["system"] for row in k["load"]}, key=["strongroom", "openbao", "pykmip"].index)
        series: dict[str, list[float | None]] = {}
        for system in systems:
            vals: list[float | None] = []
            for op in load_ops:
                matching = [x for x in k["load"] if x["system"] == system and (x.get("op") or x["label"].split(" ", 1)[1]) == op]
                vals.append(max((x["rate"] for x in matching), default=None))
            series[system] = vals
        _bars(
            out / CHARTS["keyserver"],
            "Key server: requests per second at the best client count, higher is better",
            load_ops,
            series,
            "requests/s",
            note="TLS and audit on; Strongroom on SQLite; PyKMIP: Create/Get AES-256 stand in for put/get",
        )
        made.append(CHARTS["keyserver"])
    if (rn := ok("rng")) and rn.get("keygen"):
        keygen = rn["keygen"]
        _bars(
            out / CHARTS["keygen"],
            "Latency of one 32-byte key, per source (ns, log scale; lower is better)",
            [row["source"] for row in keygen],
            {"ns per key": [row["ns_per_key"] for row in keygen]},
            "ns per 32-byte key",
            log=True,
            horizontal=True,
        )
        made.append(CHARTS["keygen"])
    if (f := ok("fs")) and f.get("rows"):
        on = [row for row in f["rows"] if row["aesni"]]
        metrics = [("write_MiBps", "write"), ("read_MiBps", "read"), ("copy_MiBps", "copy")]
        _bars(
            out / CHARTS["fs_throughput"],
            f"Filesystem throughput, {f['mib']} MiB (MiB/s, higher is better)",
            [label for _, label in metrics],
            {row["system"]: [row[m] for m, _ in metrics] for row in on},
            "MiB/s",
        )
        small = [("tar_x_s", "tar x"), ("ls_lR_s", "ls -lR"), ("rm_rf_s", "rm -rf")]
        _bars(
            out / CHARTS["fs_small_files"],
            f"Small files: {f['files']:,} files (seconds, lower is better)",
            [label for _, label in small],
            {row["system"]: [row[m] for m, _ in small] for row in on},
            "seconds",
        )
        made += [CHARTS["fs_throughput"], CHARTS["fs_small_files"]]
    aesni_groups: list[str] = []
    aesni_on: list[float | None] = []
    aesni_off: list[float | None] = []
    if f := ok("fs"):
        for system in ("gocryptfs", "strongroom"):
            for metric, label in (("write_MiBps", "write"), ("read_MiBps", "read")):
                by_aesni = {row["aesni"]: row[metric] for row in f["rows"] if row["system"] == system}
                if by_aesni:
                    aesni_groups.append(f"{system}\nfs {label}")
                    aesni_on.append(by_aesni.get(True))
                    aesni_off.append(by_aesni.get(False))
    if b := ok("bulk"):
        for tool in ("strongroom", "openssl enc -aes-256-ctr"):
            by_aesni = {row["aesni"]: row["stream_MiBps"] for row in b["rows"] if row["tool"] == tool}
            if by_aesni:
                aesni_groups.append(f"{tool.split()[0]}\nbulk encrypt")
                aesni_on.append(by_aesni.get(True))
                aesni_off.append(by_aesni.get(False))
    if aesni_groups:
        _bars(
            out / CHARTS["aesni"],
            "AES-NI on and off (MiB/s, higher is better)",
            aesni_groups,
            {"AES-NI on": aesni_on, "AES-NI off": aesni_off},
            "MiB/s",
            note="off: OPENSSL_ia32cap masks AES-NI, PCLMULQDQ, VAES and VPCLMULQDQ",
        )
        made.append(CHARTS["aesni"])
    if (b := ok("bulk")) and b["rows"]:
        labels = [f"{row['tool']}{'' if row['aesni'] else ' (no AES-NI)'}" for row in b["rows"]]
        _bars(
            out / CHARTS["bulk"],
            f"Encrypting a {b['mib']} MiB file (MiB/s, higher is better)",
            labels,
            {
                "stream (key ready)": [row["stream_MiBps"] for row in b["rows"]],
                "wall (key derivation included)": [row["wall_MiBps"] for row in b["rows"]],
            },
            "MiB/s",
            horizontal=True,
        )
        made.append(CHARTS["bulk"])
    if (a := ok("acl")) and a.get("rows"):
        _bars(
            out / CHARTS["acl"],
            "open()+read()+close() of a small file through the mount (µs, lower is better)",
            [_acl_label(row) for row in a["rows"]],
            {"µs per call": [row["us_per_open_read"] for row in a["rows"]]},
            "µs (median)",
        )
        made.append(CHARTS["acl"])
    return made


# -- report.md --------------------------------------------------------------------------------------
def _run_facts(results: dict[str, Any]) -> list[str]:
    """The run's command, time and machine, and what was missing or failed."""
    m = results["machine"]
    lines = [
        f"- command: `{results['command']}`" + (f", at commit {results['commit']}" if results.get("commit") else ""),
        f"- started {results['started']}, took {results['duration_s']:.0f} s"
        + (" (quick: small inputs)" if results["quick"] else ""),
        f"- machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('memory_gib', '?')} GiB,"
        f" kernel {m.get('kernel', '?')}, Python {m.get('python', '?')}",
        "",
    ]
    missing = [f"{suite}: {item}" for suite, r in results["suites"].items() for item in (r.get("missing") or [])]
    errors = [f"{suite}: {r['error']}" for suite, r in results["suites"].items() if "error" in r]
    if missing or errors:
        lines += ["**Missing or failed:**", ""]
        lines += [f"- **failed** {e}" for e in errors] + [f"- missing {x}" for x in missing] + [""]
    return lines


def _suite_sections(results: dict[str, Any], charts: list[str], chart_dir: str = "") -> list[str]:
    """Each suite's heading, duration, tables and charts (linked under ``chart_dir``)."""
    lines: list[str] = []
    for suite, r in results["suites"].items():
        lines += [f"## {TITLES.get(suite, suite)}", ""]
        if "error" in r:
            lines += [f"This suite failed: {r['error']}", ""]
            continue
        lines += [f"({results['durations_s'].get(suite, 0):.0f} s)", "", TABLES[suite](r), ""]
        for chart in _charts_of(suite):
            if chart in charts:
                lines += [f"![{chart}]({chart_dir}{chart})", ""]
    return lines


def markdown(results: dict[str, Any], charts: list[str]) -> str:
    lines = ["# Strongroom benchmark report", "", *_run_facts(results), *_suite_sections(results, charts)]
    return "\n".join(lines)


def _charts_of(suite: str) -> list[str]:
    return {
        "keyserver": [CHARTS["keyserver"]],
        "entropy": [CHARTS["case_study"]],
        "rng": [CHARTS["keygen"]],
        "fs": [CHARTS["fs_throughput"], CHARTS["fs_small_files"]],
        "acl": [CHARTS["acl"]],
        "bulk": [CHARTS["bulk"], CHARTS["aesni"]],
    }.get(suite, [])


def write(results: dict[str, Any], out: Path, doc: Path | None = None) -> list[str]:
    """Draws the charts and writes report.md into ``out`` (and, with ``doc``, the project's
    benchmark report there: see ``document``); returns the chart file names."""
    try:
        charts = draw_charts(results, out)
    except ImportError:  # matplotlib is an extra (scripts/install.sh installs it): the tables still count
        charts = []
        results.setdefault("notes", []).append("no charts: matplotlib is not installed (pip install 'strongroom[bench]')")
    text = markdown(results, charts)
    for note in results.get("notes", []):
        text += f"\nNOTE: {note}\n"
    (out / "report.md").write_text(text + "\n")
    if doc is not None:
        doc.write_text(document(results, charts, out, doc))
    return charts


# -- docs/BENCHMARKS.md -----------------------------------------------------------------------------
def _row(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)


def seeds_reading(results: dict[str, Any]) -> list[str]:
    """The measurements the seed documents made, beside this run's (one paragraph each, only for
    what the run measured)."""
    out: list[str] = []
    suites = results["suites"]
    rng_r = suites.get("rng", {})
    c_loop = _row(rng_r.get("keygen", []), source="C getrandom(2)")
    ours = _row(rng_r.get("keygen", []), source="strongroom new_key()")
    if c_loop and ours:
        out.append(
            "**32-byte keys (the openssl-dev getrandom thread).** The thread measured 2.9 µs per getrandom(2) call for a"
            " 32-byte key on a GCE n1-standard-1 (5.5 µs with the older SHA-1 CRNG). Here a C loop of the same call takes"
            f" {c_loop['ns_per_key'] / 1000:.2f} µs and Strongroom's `new_key()` (getrandom through Python)"
            f" {ours['ns_per_key'] / 1000:.2f} µs: the call stays a negligible part of any key operation, as the thread argued."
        )
    ent = suites.get("entropy", {}).get("rows", [])
    nothing, feed = _row(ent, config="nothing extra"), _row(ent, config="rng feed rdrand")
    if nothing and feed:
        avail = sorted({r["entropy_avail_before"] for r in ent} | {r["entropy_avail_after"] for r in ent})
        out.append(
            "**The Gazzang case study (zTrustee with RDRAND and haveged).** On its kernel, registrations waited for"
            " /dev/random, and feeding RDRAND through rngd made them much faster. Run the same way here (one client,"
            f" kernel {suites['entropy'].get('kernel', '?')}), a registration took {nothing['register_ms']:.1f} ms with"
            f" nothing extra and {feed['register_ms']:.1f} ms with `strongroom rng feed --source rdrand`"
            f" ({feed['register_ms'] / nothing['register_ms']:.2f}×), with the pool's estimate at {', '.join(map(str, avail))}"
            " in every configuration: no row waited for entropy, since a modern kernel's pool does not run dry once"
            " seeded, so whatever separates the rows is not the pool, and what a feeder adds is a second, health-tested"
            " source (docs/ENTROPY.md)."
        )
    fsr = suites.get("fs", {}).get("rows", [])
    plain = _row(fsr, system="plain", aesni=True)
    on, off = _row(fsr, system="strongroom", aesni=True), _row(fsr, system="strongroom", aesni=False)
    if plain and on and off:
        out.append(
            "**The AES-NI disk-encryption article.** Copying a 4.3 GB image took 39 % longer than unencrypted without"
            " AES-NI and 32 % longer with it. Copying 1 GiB into the mount here takes"
            f" {100 * (off['copy_s'] / plain['copy_s'] - 1):.0f} % longer than into the plain directory with AES-NI off and"
            f" {100 * (on['copy_s'] / plain['copy_s'] - 1):.0f} % with it on: a FUSE mount pays a round trip per request that"
            " a kernel encryption layer does not, and AES-NI matters far more here than there, since the cipher is a larger"
            " share of the work once the disk is fast."
        )
    bulk_r = suites.get("bulk", {}).get("rows", [])
    ssl_on = _row(bulk_r, tool="openssl enc -aes-256-ctr", aesni=True)
    ssl_off = _row(bulk_r, tool="openssl enc -aes-256-ctr", aesni=False)
    if ssl_on and ssl_off:
        out.append(
            "The same article measured OpenSSL encrypting its image 25 % faster with AES-NI; here `openssl enc"
            f" -aes-256-ctr` over 1 GiB runs {ssl_on['stream_MiBps'] / ssl_off['stream_MiBps']:.1f}× as fast with AES-NI"
            " as without (OPENSSL_ia32cap masking it): today's cores and OpenSSL widen the gap the article saw."
        )
    return out


METHOD = """\
Each suite runs the same operations on Strongroom and on its peers on the same machine in one run,
peers from Debian (gocryptfs, age, gpg, openssl, ent, rng-tools5, haveged) and PyPI (OpenBao's
`bao`, PyKMIP). These 2-core virtual machines are noisy (±10–30 % between runs): the figures to
read are ratios and medians within one run, with the peer measured beside Strongroom, never
rates compared across runs. Speed targets live here, never in timed unit tests.

```sh
bash scripts/install.sh                                          # the peers too
.venv/bin/strongroom bench --out docs/bench --doc docs/BENCHMARKS.md   # every suite (~20 min); --quick: a smoke run
.venv/bin/strongroom bench --only fs --out /tmp/b                      # one suite
```

Before and after a change, the two builds run side by side in one process, alternating
(`bench/keyserver_pair.py`, `bench/fs_small_pair.py`, `bench/fs_big_pair.py`, each with `--base`
another checkout's `src` and `--json docs/bench/pairs/KIND.json`); the report below shows the
latest of each; `bench/fs_db_pair.py` puts a database's data directory on the plain disk, gocryptfs
and Strongroom in one run (pgbench and fio, `--json docs/bench/pairs/fs_db.json`), and
`bench/vault_pair.py` the Vault-compatible API beside OpenBao (with `--base`, the build before too:
three servers, each round in another order, balanced over four rounds so that neither build keeps
one place or one neighbour; `--json docs/bench/pairs/vault.json`), and `bench/kmip_pair.py` KMIP
beside PyKMIP's server (Get and Create at 16 TLS connections from one C load generator, with
Strongroom's HTTPS get in the same rounds; `--json docs/bench/pairs/kmip.json`).
`python -m strongroom.bench.report docs/bench/results.json --doc docs/BENCHMARKS.md`
redraws this file from the stored results without running anything."""


def _pairs(pairs_dir: Path) -> list[str]:
    """Every stored side-by-side run (pairs_dir/*.json), by kind, then by file name."""
    import json

    from strongroom.bench import pairs

    runs = [json.loads(p.read_text()) for p in sorted(pairs_dir.glob("*.json"))] if pairs_dir.is_dir() else []
    order = list(pairs.TITLES)
    runs.sort(key=lambda d: order.index(d["kind"]) if d["kind"] in order else len(order))
    lines: list[str] = []
    for data in runs:
        m = data["machine"]
        lines += [
            f"### {pairs.TITLES.get(data['kind'], data['kind'])}",
            "",
            f"`{data['command']}`, {data['started']}, {data['rounds']} rounds, after = {data['this']};"
            f" {m.get('cpu', '?')}, {m.get('cores', '?')} cores, kernel {m.get('kernel', '?')}."
            " Each figure is the median over rounds of after / before in the same round: for times and CPU below 1 is"
            " better, for rates above 1.",
            "",
            pairs.table(data),
            "",
        ]
        if data["kind"] == "vault":
            lines += [_vault_verdict(data), ""]
        if data["kind"] == "fs_db":
            lines += [_db_verdict(data), ""]
        if data["kind"] == "kmip":
            lines += [_kmip_verdict(data), ""]
    return lines


def _kmip_verdict(data: dict[str, Any]) -> str:
    """Issue 40's targets against the stored run: KMIP Get at least 10x PyKMIP's rate and 0.5x Strongroom's own HTTPS get."""
    get = next((r for r in data["rows"] if r["phase"].startswith("KMIP get")), None)
    if get is None:
        return "Targets: no Get row in this run."
    peer, own = get["rate vs PyKMIP"], get.get("rate vs own HTTPS get", 0.0)
    return (
        f"Targets: Get at least 10x PyKMIP's rate: {'met' if peer >= 10 else 'MISSED'} ({peer:.1f}x); at least 0.5x"
        f" Strongroom's own HTTPS get in the same rounds: {'met' if own >= 0.5 else 'MISSED'} ({own:.2f}x). One C load"
        " generator (kmip_load.c, TLS with client certificates) drives both KMIP servers; wrk drives the HTTPS get."
    )


def _vault_verdict(data: dict[str, Any]) -> str:
    """Issue 21's targets against the stored run: every row at least OpenBao's rate, KV reads' p99 under 10 ms."""
    rows = data["rows"]
    slow = [r["phase"] for r in rows if r.get("rate vs OpenBao", 0.0) < 1.0]
    reads = [r for r in rows if r["phase"].startswith("kv read")]
    p99 = max((r["Strongroom p99 ms"] for r in reads), default=float("nan"))
    rate = "met" if not slow else f"MISSED ({', '.join(slow)})"
    latency = "met" if p99 < 10 else "MISSED"
    return (
        f"Targets: every row at least 1.0x OpenBao's rate: {rate}; p99 of KV reads under 10 ms: {latency} ({p99:.1f} ms)."
        " OpenBao's listener is configured to accept the 1,000-item batch (`max_request_json_strings = 10000`; its"
        " default of 1,000 strings refuses it)."
    )


def _db_verdict(data: dict[str, Any]) -> str:
    """Issue 35's target against the stored run: pgbench and fio each at least gocryptfs's rate."""
    rows = [r for r in data["rows"] if r["base"] == "gocryptfs"]
    rates = [r for r in rows if not r["phase"].endswith(" us")]  # the latency row is information
    slow = [f"{r['phase']} {r['Strongroom / it']:.2f}x" for r in rates if r["Strongroom / it"] < 1.0]
    return "Target: every rate at least 1.0x gocryptfs's: " + ("met." if not slow else f"MISSED ({', '.join(slow)}).")


def document(results: dict[str, Any], charts: list[str], out: Path, doc: Path) -> str:
    """docs/BENCHMARKS.md: method, the machine and command of the latest full run, a reading of
    the seed documents' figures beside this run's, every suite's tables and charts, and the
    latest side-by-side runs of two builds (``out``/pairs/*.json)."""
    import os

    rel = os.path.relpath(out, doc.parent)
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `strongroom bench` from `{rel}/results.json` and `{rel}/pairs/`; not edited by hand (earlier"
        " reports are in git's history).",
        "",
        "## Method",
        "",
        METHOD,
        "",
        "## This run",
        "",
        *_run_facts(results),
    ]
    reading = seeds_reading(results)
    if reading:
        lines += ["## Against the seed documents", ""]
        for paragraph in reading:
            lines += [paragraph, ""]
    lines += _suite_sections(results, charts, f"{rel}/")
    side = _pairs(out / "pairs")
    if side:
        lines += ["## Side by side in one run: builds before and after, and the Vault-compatible API", ""] + side
    for note in results.get("notes", []):
        lines += [f"NOTE: {note}", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Redraw report.md and the charts from a results.json (e.g. after changing a chart)."""
    import argparse
    import json
    import sys

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("results", type=Path)
    ap.add_argument("--out", type=Path, help="Directory to write into (default: the results file's).")
    ap.add_argument("--doc", type=Path, help="Also write the project's report (docs/BENCHMARKS.md) here.")
    args = ap.parse_args(argv)
    try:
        results = json.loads(args.results.read_text())
        out = args.out or args.results.parent
        out.mkdir(parents=True, exist_ok=True)
        results["charts"] = write(results, out, args.doc)
    except (OSError, ValueError, KeyError) as e:  # one line, not a traceback
        why = f"it has no {e} field (not a strongroom bench results.json)" if isinstance(e, KeyError) else str(e)
        print(f"report: cannot redraw from {args.results}: {why}", file=sys.stderr)
        return 1
    print(f"{out / 'report.md'}: {len(results['charts'])} charts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
