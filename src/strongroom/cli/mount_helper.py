"""`mount.strongroom`: the helper mount(8) runs for an /etc/fstab line of type ``strongroom``,

    /srv/vault  /mnt/vault  strongroom  profile=/etc/strongroom/host,_netdev,nofail  0 0

so that ``mount /mnt/vault`` and ``mount -a`` mount a volume.  mount(8) calls it as
``mount.strongroom SPEC DIR [-sfnv] [-o OPTIONS]``; it runs ``strongroom fs mount``, which returns
once the mount is up.  Exit codes as mount(8) documents: 1 for a wrong invocation, 32 when the
mount failed.
"""

from __future__ import annotations

import os
import subprocess
import sys

USAGE = "usage: mount.strongroom VOLUME MOUNTPOINT [-sfnv] [-o OPTIONS]"
# options mount(8) and systemd read for themselves: not ours, not an error
GENERIC = {"defaults", "auto", "noauto", "user", "users", "nouser", "owner", "group", "_netdev", "nofail", "rw", "exec"}
GENERIC |= {"noexec", "suid", "nosuid", "atime", "noatime", "relatime", "strictatime", "nodiratime", "sync", "async", "nodev"}
VALUED = {"profile": "--profile", "server": "--server", "passphrase_file": "--passphrase-file"}
VALUED |= {"attr_timeout": "--attr-timeout", "acl_timeout": "--acl-timeout"}
FLAGS = {"allow_other": "--allow-other", "ro": "--read-only", "dev": "--dev"}


class Usage(Exception):
    pass


def translate(options: str, sloppy: bool = False) -> list[str]:
    """fstab options -> `strongroom fs mount` options."""
    out: list[str] = []
    for opt in filter(None, options.split(",")):
        name, eq, value = opt.partition("=")
        key = name.replace("-", "_")
        if name in GENERIC or name.startswith(("x-", "comment=")) or key in ("x_systemd",):
            continue
        if key in FLAGS and not eq:
            out.append(FLAGS[key])
        elif key in VALUED and eq and value:
            out += [VALUED[key], value]
        elif not sloppy:
            raise Usage(f"mount.strongroom: unknown option {name!r} (known: {', '.join(sorted({*FLAGS, *VALUED}))})")
    return out


def parse(argv: list[str]) -> tuple[str, str, list[str], bool]:
    """(volume, mountpoint, fs mount options, fake) from mount(8)'s arguments."""
    args, options, flags = [], "", ""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-o":
            if i + 1 >= len(argv):
                raise Usage(USAGE)
            options = ",".join(filter(None, (options, argv[i + 1])))
            i += 2
            continue
        if a in ("-t", "-N"):
            i += 2  # the type (strongroom) and a namespace: nothing to do with them
            continue
        if a.startswith("-") and len(a) > 1:
            flags += a[1:]
        else:
            args.append(a)
        i += 1
    if len(args) != 2:
        raise Usage(USAGE)
    return args[0], args[1], translate(options, "s" in flags), "f" in flags


def main(argv: list[str] | None = None) -> int:
    try:
        volume, mountpoint, options, fake = parse(sys.argv[1:] if argv is None else argv)
    except Usage as e:
        print(e, file=sys.stderr)
        return 1
    if fake:
        return 0
    cmd = [sys.executable, "-m", "strongroom.cli.main", "fs", "mount", *options, volume, mountpoint]
    # mount(8) runs helpers with a bare environment: a profile comes from the options, not $HOME
    done = subprocess.run(cmd, env={**os.environ, "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")})
    return 0 if done.returncode == 0 else 32


if __name__ == "__main__":
    sys.exit(main())
