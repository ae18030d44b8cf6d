#!/usr/bin/env bash
# Installs everything Strongroom needs on Debian 12: system packages (as root), a venv, the package.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(python3 python3-venv python3-dev gcc ca-certificates postgresql wrk ent rng-tools5 fuse3 libfuse3-3 gocryptfs sqlite3 libssl-dev libsodium23 age gpg haveged
  autoconf automake libtool make perl  # this line builds and runs pjdfstest (tests/fs/test_pjdfstest.py)
  acl rsync  # POSIX ACLs on the mount (tests/fs/test_posix_acl.py)
  fio  # bench/fs_db_pair.py
  softhsm2  # PKCS#11 auto-unseal is tested against SoftHSM2 tokens
  systemd  # systemd-analyze verifies the units (tests/cli/test_systemd.py)
  tang clevis  # network-bound unlock is tested against Debian's Tang server and clevis client
  curl nodejs)  # Vault clients in the differential tests: curl, and node-vault (npm, below)

if [ "$(id -u)" = 0 ]; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ! command -v npm >/dev/null; then
    missing+=(npm)  # Debian's nodejs comes without it (other builds of nodejs carry their own)
  fi
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
# The package build (setup.py) compiles the C helpers beside their modules; a leftover from before
# that (the rng helper's old name) would only confuse a reader.
rm -f src/strongroom/rng/libsrfips.so
# node-vault, a Vault client the differential tests drive (tests/server/vault/test_node_vault.py)
if [ ! -f .venv/node/node_modules/node-vault/package.json ]; then
  npm install -s --no-audit --no-fund --prefix .venv/node node-vault@0.12.0
fi
# PyKMIP's own server, the KMIP tests' reference, needs SQLAlchemy 1.x: a venv of its own
if [ ! -x .venv/pykmip/bin/pykmip-server ]; then
  python3 -m venv .venv/pykmip
  .venv/pykmip/bin/python -m pip install -q --disable-pip-version-check 'pykmip==0.10.0' 'sqlalchemy>=1.4,<2'  # as bench/peers.py pins
fi
echo "install.sh: ready (.venv/bin/strongroom)"
