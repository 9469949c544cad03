#!/bin/sh
# Runs the OpenResty benchmark (see README.md here): builds and installs the rock for LuaJIT,
# then bench/ngx/run.lua. Settings through the environment, e.g.
#   ROUNDS=5 DURATION=10 bench/ngx/run.sh
# or another script of this folder with the same set-up: bench/ngx/run.sh bench/ngx/shared.lua;
# arguments after the script are the script's (bench/ngx/run.sh bench/ngx/heavy.lua --out=FILE).
set -eu
cd "$(dirname "$0")/../.."
[ "${SKIP_BUILD:-}" = 1 ] || scripts/rock.sh luajit
for cmd in nginx wrk luajit; do
  command -v "$cmd" >/dev/null 2>&1 || { echo "vmpool: $cmd is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
scripts/worker-can-read.sh .
VMPOOL_NGX_TMP=$(mktemp -d /tmp/vmpool-ngx-bench.XXXXXX)
# the workers run as nobody when this runs as root: they read Lua files under the prefix
chmod 755 "$VMPOOL_NGX_TMP"
VMPOOL_ROOT=$PWD
export VMPOOL_NGX_TMP VMPOOL_ROOT
cleanup() {
  for pidfile in "$VMPOOL_NGX_TMP"/*/logs/nginx.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
  done
  rm -rf "$VMPOOL_NGX_TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
script=${1:-bench/ngx/run.lua}
[ $# -gt 0 ] && shift
luajit "$script" "$@"
