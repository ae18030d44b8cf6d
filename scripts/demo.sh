#!/usr/bin/env bash
# Installs everything, then runs the main job end to end on the embedded default (SQLite):
# init a server, start it, register a client, put and get a deposit, draw entropy,
# verify the audit log, create an encrypted volume keyed by the server, mount it, write through
# it and show that only ciphertext is on disk, stop.
# --hsm: the server is sealed by a key in a SoftHSM2 token the demo makes, and unseals itself
# (no passphrase at start or for the audit check), with recovery shares printed once.
set -euo pipefail
cd "$(dirname "$0")/.."
hsm=0
for arg in "$@"; do
  case "$arg" in
    --hsm) hsm=1 ;;
    *) echo "usage: scripts/demo.sh [--hsm]" >&2; exit 2 ;;
  esac
done
bash scripts/install.sh
export PATH="$PWD/.venv/bin:$PATH"

work=$(mktemp -d /tmp/strongroom-demo.XXXXXX)
server_pid=""
cleanup() {
  if grep -q " $work/mnt " /proc/mounts 2>/dev/null; then strongroom fs umount "$work/mnt" || true; fi
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"; wait "$server_pid" || true
  fi
}
trap cleanup EXIT
echo "== working in $work"
head -c 24 /dev/urandom | base64 > "$work/passphrase"
chmod 600 "$work/passphrase"
export STRONGROOM_DATA="$work/server" STRONGROOM_PROFILE="$work/client"

seal=(--passphrase-file "$work/passphrase")
if [ "$hsm" = 1 ]; then
  echo "== a SoftHSM2 token for the server's seal"
  mkdir -p "$work/hsm/tokens"
  printf 'directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n' "$work/hsm/tokens" > "$work/hsm/softhsm2.conf"
  export SOFTHSM2_CONF="$work/hsm/softhsm2.conf"
  pin=$(head -c 12 /dev/urandom | base64 | tr -d '/+=')
  printf '%s' "$pin" > "$work/hsm/pin"; chmod 600 "$work/hsm/pin"
  softhsm2-util --init-token --free --label strongroom --pin "$pin" --so-pin "$pin$pin" >/dev/null
  seal=()
fi

echo "== strongroom server init"
if [ "$hsm" = 1 ]; then
  strongroom server init --hsm-lib /usr/lib/softhsm/libsofthsm2.so --hsm-token strongroom \
    --hsm-pin-file "$work/hsm/pin" --key-shares 3 --key-threshold 2 --json > "$work/init.json"
  echo "   sealed by a non-extractable key in the token; 2 of 3 recovery shares in $work/init.json"
else
  strongroom server init "${seal[@]}" --json > "$work/init.json"
fi
secret=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["auth_secret"])' "$work/init.json")
echo "   organization 'default' created; CA at $STRONGROOM_DATA/tls/ca.pem"

echo "== strongroom server start (HTTPS on 127.0.0.1:8443, 2 workers)"
strongroom server start "${seal[@]}" --listen 127.0.0.1:8443 --workers 2 > "$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  curl -sf --cacert "$STRONGROOM_DATA/tls/ca.pem" https://127.0.0.1:8443/health >/dev/null 2>&1 && break
  python3 - "$STRONGROOM_DATA/tls/ca.pem" <<'PY' 2>/dev/null && break
import ssl, sys, urllib.request
urllib.request.urlopen("https://127.0.0.1:8443/health", context=ssl.create_default_context(cafile=sys.argv[1]), timeout=1)
PY
  sleep 0.2
done
if [ "$hsm" = 1 ]; then
  for _ in $(seq 100); do  # the writer process asks the token, then grants the workers
    python3 - "$STRONGROOM_DATA/tls/ca.pem" <<'PY' 2>/dev/null && break
import json, ssl, sys, urllib.request
h = json.load(urllib.request.urlopen("https://127.0.0.1:8443/health", context=ssl.create_default_context(cafile=sys.argv[1]), timeout=1))
sys.exit(1 if h["sealed"] else 0)
PY
    sleep 0.2
  done
  strongroom server seal-status --server https://127.0.0.1:8443
fi

echo "== strongroom register"
STRONGROOM_AUTH_SECRET="$secret" strongroom register --server https://127.0.0.1:8443 \
  --ca "$STRONGROOM_DATA/tls/ca.pem" --org default --name demo-host

echo "== strongroom put / get"
head -c 32 /dev/urandom > "$work/volume.key"
strongroom put volume-key "$work/volume.key" --max-retrievals 100 --expires 1d
strongroom get volume-key -o "$work/volume.key.back"
cmp "$work/volume.key" "$work/volume.key.back" && echo "   round trip OK: 32-byte key deposited and retrieved"
printf 'hunter2' | strongroom put db-password -
printf '   db-password = %s\n' "$(strongroom get db-password)"
strongroom ls

echo "== strongroom entropy"
strongroom entropy --bytes 32 --json

echo "== audit log"
strongroom server audit tail -n 10 --server https://127.0.0.1:8443
strongroom server audit verify "${seal[@]}"
if grep -a -q hunter2 "$STRONGROOM_DATA"/strongroom.db*; then
  echo "FAIL: plaintext found in the database" >&2; exit 1
fi
echo "   no deposit plaintext in the database file"

echo "== encrypted volume, its key on the server"
strongroom fs init "$work/volume" --key-server --deposit demo-volume-key
mkdir -p "$work/mnt"
strongroom fs mount "$work/volume" "$work/mnt"
mkdir "$work/mnt/reports"
printf 'quarterly numbers: confidential\n' > "$work/mnt/reports/q3.txt"
cp /etc/services "$work/mnt/services"
echo "   through the mount:"; ls -l "$work/mnt" "$work/mnt/reports" | sed 's/^/     /'
echo "   on disk (names and contents encrypted):"; ls -lR "$work/volume" | sed 's/^/     /'
if grep -r -a -q -e confidential -e reports -e services "$work/volume"; then
  echo "FAIL: plaintext found in the volume directory" >&2; exit 1
fi
echo "   no plaintext name or content in $work/volume"
strongroom fs umount "$work/mnt"
strongroom fs mount "$work/volume" "$work/mnt"
cmp /etc/services "$work/mnt/services" && echo "   remounted with the key from the server: contents intact"
strongroom fs umount "$work/mnt"

echo "== stop"
kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
echo "demo finished: everything above ran against a real HTTPS server on SQLite"
