#!/usr/bin/env bash
# Installs everything Strongroom needs on Debian 12: system packages (as root), a venv, the package.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(python3 python3-venv python3-dev gcc ca-certificates postgresql wrk ent rng-tools5 fuse3 libfuse3-3 gocryptfs sqlite3 libssl-dev libsodium23 age gpg haveged
  autoconf automake libtool make perl)  # the second line builds and runs pjdfstest (tests/fs/test_pjdfstest.py)

if [ "$(id -u)" = 0 ]; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
else
  echo "install.sh: not root; assuming these Debian packages are present: ${APT_PACKAGES[*]}" >&2
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,bench]'
# strongroom.rng's compiled helpers (FIPS blocks, ent's sums, SP 800-90B tests, RDRAND/RDSEED), loaded
# with ctypes.  Portable x86-64 code: what needs newer instructions (popcnt, RDRAND, RDSEED) is
# picked at run time (target_clones and target attributes), so a venv moved to an older CPU works.
rm -f src/strongroom/rng/libsrfips.so
cc -O3 -Wall -shared -fPIC -o src/strongroom/rng/libsrrng.so src/strongroom/rng/*.c
# strongroom.fs's block loop around the OS's libcrypto (AES-256-GCM per 4 KiB block, GIL released).
cc -O2 -Wall -shared -fPIC -o src/strongroom/fs/libsrblocks.so src/strongroom/fs/blockcrypt.c -lcrypto
# The access checks' process identity (/proc reads in one call, on every checked open).
cc -O2 -Wall -shared -fPIC -o src/strongroom/fs/libsrproc.so src/strongroom/fs/procid.c
# The mount's /dev/fuse I/O: takes set-id clearing over from the kernel (libfuse 3.14 cannot ask).
cc -O2 -Wall -shared -fPIC -o src/strongroom/fs/libsrfuseio.so src/strongroom/fs/fuseio.c src/strongroom/fs/setid.c src/strongroom/fs/baton.c -l:libfuse3.so.3
echo "install.sh: ready (.venv/bin/strongroom)"
