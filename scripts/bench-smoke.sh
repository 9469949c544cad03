#!/bin/sh
# Runs every benchmark script once in its quick mode (BENCH_QUICK=1), so that none can rot: this
# checks that each still works against the current API, not what it measures (no figure from here
# is a verdict). Run by scripts/test.sh after the Lua 5.4 rock is built (BENCH_SMOKE=0 skips).
# Usage: scripts/bench-smoke.sh [LUA] (default lua5.4; the rock must be built for it)
set -eu
cd "$(dirname "$0")/.."
LUA=${1:-lua5.4}
export LUA BENCH_QUICK=1
# shellcheck disable=SC1091
. scripts/luaenv.sh
run() {
  echo "== bench smoke ($LUA): $*"
  "$LUA" "$@" > /tmp/vmpool-bench-smoke.$$ 2>&1 || { cat /tmp/vmpool-bench-smoke.$$; rm -f /tmp/vmpool-bench-smoke.$$; exit 1; }
  rm -f /tmp/vmpool-bench-smoke.$$
}
run bench/suites/micro.lua --scale=0.001
run bench/suites/workload.lua --strategy=unbounded --p=10 --calls=200 --cpus=2
run bench/probes/chunks.lua
run bench/probes/limits.lua
run bench/probes/shared.lua
run bench/suites/map.lua
run bench/suites/speedup.lua
run bench/probes/futures.lua
run bench/probes/run_throughput.lua
run bench/probes/tables.lua
run bench/probes/cqueues_floor.lua
case $LUA in lua5.1 | lua5.4 | luajit)
  echo "== bench smoke ($LUA): bench/probes/echo_floor.sh"
  bench/probes/echo_floor.sh "$LUA" ;;
esac
run bench/peers/channels.lua --scale=0.01
# what bench/callgrind runs under valgrind, here without it: each kind once
for kind in direct invoke echo10 co_invoke ring run1000 luv cqueues chan_pingpong chan_to_host chan_stream; do
  run bench/suites/cg.lua --kind="$kind" --n=2000
done
# the OpenResty scripts, when the LuaJIT rock is built (make test builds it) and nginx is there
if [ -d lua_modules/luajit ] && command -v nginx >/dev/null 2>&1; then
  echo "== bench smoke (luajit, nginx): bench/ngx/shared.lua"
  SKIP_BUILD=1 ROUNDS=1 N=1000 bench/ngx/run.sh bench/ngx/shared.lua > /tmp/vmpool-bench-smoke.$$ 2>&1 ||
    { cat /tmp/vmpool-bench-smoke.$$; rm -f /tmp/vmpool-bench-smoke.$$; exit 1; }
  rm -f /tmp/vmpool-bench-smoke.$$
  if command -v wrk >/dev/null 2>&1; then
    echo "== bench smoke (luajit, nginx): bench/ngx/run.lua"
    SKIP_BUILD=1 ROUNDS=1 DURATION=1 WARMUP=1 bench/ngx/run.sh bench/ngx/run.lua --out=/tmp/vmpool-bench-smoke.$$.dat \
      > /tmp/vmpool-bench-smoke.$$ 2>&1 && grep -q "run_worker_thread" /tmp/vmpool-bench-smoke.$$.dat ||
      { cat /tmp/vmpool-bench-smoke.$$; rm -f /tmp/vmpool-bench-smoke.$$ /tmp/vmpool-bench-smoke.$$.dat; exit 1; }
    rm -f /tmp/vmpool-bench-smoke.$$ /tmp/vmpool-bench-smoke.$$.dat
    echo "== bench smoke (luajit, nginx): bench/ngx/heavy.lua"
    SKIP_BUILD=1 bench/ngx/run.sh bench/ngx/heavy.lua > /tmp/vmpool-bench-smoke.$$ 2>&1 ||
      { cat /tmp/vmpool-bench-smoke.$$; rm -f /tmp/vmpool-bench-smoke.$$; exit 1; }
    rm -f /tmp/vmpool-bench-smoke.$$
  fi
  # valgrind is not a dependency of the tests (scripts/install-deps.sh lists it as an extra)
  if command -v wrk >/dev/null 2>&1 && command -v valgrind >/dev/null 2>&1; then
    echo "== bench smoke (luajit, nginx, valgrind): bench/ngx/instructions.lua"
    SKIP_BUILD=1 ENDPOINTS=vmpool bench/ngx/run.sh bench/ngx/instructions.lua --out=/tmp/vmpool-bench-smoke.$$.dat \
      > /tmp/vmpool-bench-smoke.$$ 2>&1 && grep -q "loop = " /tmp/vmpool-bench-smoke.$$.dat ||
      { cat /tmp/vmpool-bench-smoke.$$; rm -f /tmp/vmpool-bench-smoke.$$ /tmp/vmpool-bench-smoke.$$.dat; exit 1; }
    rm -f /tmp/vmpool-bench-smoke.$$ /tmp/vmpool-bench-smoke.$$.dat
  fi
fi
echo "bench smoke: every benchmark script ran"
