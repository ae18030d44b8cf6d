"""`strongroom acl ...`: which programs may see a volume's plaintext (src/strongroom/fs/acl.py).

Every change needs the volume key (passphrase or the key server): the rules carry a MAC under it.
A mounted volume picks changes up within half a second, without remounting.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from strongroom.cli.common import CliError, Group, emit, json_option, passphrase_option, profile_option
from strongroom.cli.fs_cmds import _volume_keys


@click.group("acl", cls=Group)
def acl() -> None:
    """Process-based access control: only listed programs see a volume's plaintext."""


def _volume_of(target: Path) -> Path:
    """The volume directory for a volume dir or a mountpoint."""
    from strongroom.fs import mount
    from strongroom.fs.config import CONFIG

    source = mount.mounted_at(target)  # first: looking inside a mount with rules may be refused
    if source and source.startswith("strongroom:"):
        return Path(source[len("strongroom:") :])
    if (target / CONFIG).is_file():
        return target
    raise CliError(f"{target} is neither a Strongroom volume nor a mounted one", code=2)


def _open_rules(
    target: Path, passphrase_file: Path | None, profile: Path | None, servers: tuple[str, ...]
) -> tuple[Path, bytes, Any]:
    from strongroom.fs import acl as acl_mod

    volume = _volume_of(target)
    keys = _volume_keys(volume, passphrase_file, profile, servers)
    try:
        rules = acl_mod.load_rules(volume, keys.rules_mac) or acl_mod.RuleSet()
    except acl_mod.AclError as e:
        raise CliError(f"{e}: remove {acl_mod.RULES_FILE} and add the rules again (that needs the key)") from None
    return volume, keys.rules_mac, rules


def _show(rules: Any, as_json: bool) -> None:
    from dataclasses import asdict

    out = {"mode": rules.mode, "rules": [asdict(r) for r in rules.rules]}

    def human(o: dict[str, Any]) -> None:
        click.echo(f"mode: {o['mode']}")
        for r in o["rules"]:
            extra = "".join(
                [
                    f" uid={r['uid']}" if r["uid"] is not None else "",
                    f" args={' '.join(r['args_prefix'])}" if r["args_prefix"] else "",
                    f" children={','.join(f'{c} ({d[:16]})' for c, d in r['pinned_children'].items())}"
                    if r["pinned_children"]
                    else "",
                    f" unpinned-children={','.join(r['children'])} (refused: run update-fingerprints)" if r["children"] else "",
                ]
            )
            click.echo(f"{r['id']}: {r['program']} ({r['sha256'][:16]}) {r['mode']} {r['path']}{extra}")

    emit(out, as_json, human)


@acl.command("add")
@click.argument("target", metavar="MOUNT|DIR", type=click.Path(path_type=Path))
@click.option("--allow", "program", required=True, help="The program's absolute path.")
@click.option("--sha256", "digest", default="auto", show_default=True, help="Its SHA-256, or auto to hash it now.")
@click.option(
    "--path", "glob", default="**", show_default=True, help="What it may reach, relative to the volume root (db/**, *.log)."
)
@click.option("--mode", type=click.Choice(["r", "rw"]), default="rw", show_default=True)
@click.option("--uid", type=int, help="Only when running as this uid.")
@click.option("--args-prefix", multiple=True, help="argv[1:] must start with these (an interpreter's script), repeatable.")
@click.option(
    "--children",
    multiple=True,
    help="Programs let in when started (directly or not) by this one, pinned by path and SHA-256 now, repeatable.",
)
@passphrase_option
@profile_option
@json_option
def acl_add(
    target: Path,
    program: str,
    digest: str,
    glob: str,
    mode: str,
    uid: int | None,
    args_prefix: tuple[str, ...],
    children: tuple[str, ...],
    passphrase_file: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
    as_json: bool,
) -> None:
    """Allow a program (pinned by its SHA-256) to reach the volume.  With rules present,
    everything not allowed is refused (EACCES) in enforcing mode.

    \b
    Example:
      strongroom acl add /var/lib/postgresql --allow /usr/lib/postgresql/15/bin/postgres
      strongroom acl add /srv/app --allow /usr/bin/python3.11 --args-prefix /opt/app/run.py --path 'data/**'
    """
    from strongroom.fs import acl as acl_mod

    if not os.path.isabs(program) or not os.path.isfile(program):
        raise CliError(f"{program}: give the absolute path of an existing program")
    real = os.path.realpath(program)  # /proc/PID/exe names the real file, not a symlink to it
    if digest == "auto":
        digest = acl_mod.sha256_file(real)
    elif len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest.lower()):
        raise CliError("--sha256 takes auto or 64 hex digits")
    pinned = {}
    for c in children:
        if not os.path.isabs(c) or not os.path.isfile(c):
            raise CliError(f"{c}: give the absolute path of an existing program for --children")
        pinned[os.path.realpath(c)] = acl_mod.sha256_file(os.path.realpath(c))
    volume, key, rules = _open_rules(target, passphrase_file, profile, servers)
    ids = [int(r.id[1:]) for r in rules.rules if r.id[1:].isascii() and r.id[1:].isdigit()]
    rule = acl_mod.Rule(
        id=f"r{max(ids, default=0) + 1}",
        program=real,
        sha256=digest.lower(),
        path=glob,
        mode=mode,
        uid=uid,
        args_prefix=list(args_prefix),
        pinned_children=pinned,
    )
    rules.rules.append(rule)
    acl_mod.save_rules(volume, key, rules)
    _show(rules, as_json)


@acl.command("ls")
@click.argument("target", metavar="MOUNT|DIR", type=click.Path(path_type=Path))
@passphrase_option
@profile_option
@json_option
def acl_ls(target: Path, passphrase_file: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """List the rules (verified with the volume key).

    \b
    Example:
      strongroom acl ls /srv/vault
    """
    _show(_open_rules(target, passphrase_file, profile, servers)[2], as_json)


@acl.command("rm")
@click.argument("target", metavar="MOUNT|DIR", type=click.Path(path_type=Path))
@click.argument("rule_id", metavar="ID")
@passphrase_option
@profile_option
@json_option
def acl_rm(
    target: Path, rule_id: str, passphrase_file: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool
) -> None:
    """Remove a rule.

    \b
    Example:
      strongroom acl rm /srv/vault r2
    """
    from strongroom.fs import acl as acl_mod

    volume, key, rules = _open_rules(target, passphrase_file, profile, servers)
    kept = [r for r in rules.rules if r.id != rule_id]
    if len(kept) == len(rules.rules):
        raise CliError(f"no rule {rule_id}")
    rules.rules = kept
    acl_mod.save_rules(volume, key, rules)
    _show(rules, as_json)


@acl.command("mode")
@click.argument("target", metavar="MOUNT|DIR", type=click.Path(path_type=Path))
@click.argument("mode", type=click.Choice(["enforcing", "permissive", "off"]))
@passphrase_option
@profile_option
@json_option
def acl_mode(
    target: Path, mode: str, passphrase_file: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool
) -> None:
    """enforcing (refuse), permissive (allow, but log each would-be denial once per program and
    directory), or off.

    \b
    Example:
      strongroom acl mode /srv/vault permissive
    """
    from strongroom.fs import acl as acl_mod

    volume, key, rules = _open_rules(target, passphrase_file, profile, servers)
    rules.mode = mode
    acl_mod.save_rules(volume, key, rules)
    _show(rules, as_json)


@acl.command("update-fingerprints")
@click.argument("target", metavar="MOUNT|DIR", type=click.Path(path_type=Path))
@click.option("--yes", is_flag=True, help="Apply without asking.")
@passphrase_option
@profile_option
@json_option
def acl_update(
    target: Path, yes: bool, passphrase_file: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool
) -> None:
    """After a software upgrade: hash the listed programs again, show what changed, re-pin.

    \b
    Example:
      strongroom acl update-fingerprints /srv/vault --yes
    """
    from strongroom.fs import acl as acl_mod

    volume, key, rules = _open_rules(target, passphrase_file, profile, servers)
    changes = []
    for r in rules.rules:
        # the program, its pinned children, and children an older Strongroom named by path alone
        listed = [(r.program, r.sha256, None), *((c, d, "child") for c, d in r.pinned_children.items())]
        listed += [(c, "", "child") for c in r.children]
        for program, old, role in listed:
            change: dict[str, Any] = {"id": r.id, "program": program, "old": old, "child": role is not None}
            try:
                now = acl_mod.sha256_file(program)
            except OSError as e:
                changes.append({**change, "new": None, "error": e.strerror})
                continue
            if now != old:
                changes.append({**change, "new": now})
    if not as_json:
        for c in changes:
            was = c["old"][:16] or "path only"
            click.echo(f"{c['id']}: {c['program']}: {was} -> {(c['new'] or 'missing: ' + c.get('error', ''))[:16]}")
        if not changes:
            click.echo("no program changed")
    if changes and (yes or (not as_json and click.confirm("re-pin these?"))):
        for c in changes:
            if c["new"]:
                r = next(r for r in rules.rules if r.id == c["id"])
                if not c["child"]:
                    r.sha256 = c["new"]
                else:
                    r.pinned_children[c["program"]] = c["new"]
                    if c["program"] in r.children:
                        r.children.remove(c["program"])
        acl_mod.save_rules(volume, key, rules)
    if as_json:
        click.echo(json.dumps({"changes": changes, "applied": bool(changes and yes)}))


@acl.command("learn")
@click.argument("target", metavar="MOUNT|DIR", type=click.Path(path_type=Path))
@click.option("--apply", "apply_", is_flag=True, help="Add the proposed rules.")
@passphrase_option
@profile_option
@json_option
def acl_learn(
    target: Path, apply_: bool, passphrase_file: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool
) -> None:
    """Turn what the mount denied (or, in permissive mode, would have) into proposed rules.

    \b
    Example:
      strongroom acl mode /srv/vault permissive; run the application; strongroom acl learn /srv/vault --apply
    """
    from dataclasses import asdict

    from strongroom.fs import acl as acl_mod

    volume, key, rules = _open_rules(target, passphrase_file, profile, servers)
    keys = _volume_keys(volume, passphrase_file, profile, servers)
    log_path = acl_mod.learn_log_path(keys.volume_id)
    entries = [json.loads(line) for line in log_path.read_text().splitlines()] if log_path.exists() else []
    proposed = acl_mod.propose(entries)
    if apply_:
        ids = [int(r.id[1:]) for r in rules.rules if r.id[1:].isascii() and r.id[1:].isdigit()]
        for n, r in enumerate(proposed, start=max(ids, default=0) + 1):
            r.id = f"r{n}"
            rules.rules.append(r)
        acl_mod.save_rules(volume, key, rules)
        log_path.unlink(missing_ok=True)
    out = {"proposed": [asdict(r) for r in proposed], "applied": apply_}

    def human(o: dict[str, Any]) -> None:
        for r in o["proposed"]:
            click.echo(f"strongroom acl add {target} --allow {r['program']} --sha256 {r['sha256']} \\")
            click.echo(f"    --path '{r['path']}' --mode {r['mode']}")
        if not o["proposed"]:
            click.echo("nothing was denied")

    emit(out, as_json, human)
