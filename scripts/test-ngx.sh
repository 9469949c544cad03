#!/bin/sh
# The OpenResty integration suite: starts Debian's nginx (libnginx-mod-http-lua) with its own
# prefixes under a temporary directory and tests vmpool.ngx over HTTP (spec/ngx/). Needs the rock
# built for LuaJIT (scripts/rock.sh luajit), nginx, libnginx-mod-http-lua, lua-resty-core and wrk.
# Usage: scripts/test-ngx.sh [busted options]
set -eu
cd "$(dirname "$0")/.."
if [ ! -f lua_modules/luajit/lib/lua/5.1/vmpool.so ]; then
  echo "vmpool: build the rock for LuaJIT first (scripts/rock.sh luajit)" >&2
  exit 1
fi
for cmd in nginx wrk; do
  command -v "$cmd" >/dev/null 2>&1 || { echo "vmpool: $cmd is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
scripts/worker-can-read.sh .
VMPOOL_NGX_TMP=$(mktemp -d /tmp/vmpool-ngx-test.XXXXXX)
VMPOOL_ROOT=$PWD
export VMPOOL_NGX_TMP VMPOOL_ROOT
# Whatever happens to the suite, no nginx of ours outlives it: each instance's master pid is in
# its prefix; workers exit with their master.
cleanup() {
  for pidfile in "$VMPOOL_NGX_TMP"/*/logs/nginx.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || continue
    kill -TERM "$pid" 2>/dev/null || true
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$VMPOOL_NGX_TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# busted itself does not load vmpool (the nginx workers do, from lua_modules/luajit)
busted --lua=luajit --pattern=_ngx --output=utfTerminal "$@" spec/ngx
