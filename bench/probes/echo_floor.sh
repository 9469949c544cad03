#!/bin/sh
# The floor of the 10-field echo through Lua's C API (echo_floor.c says what it counts):
# instructions per call, callgrind on one CPU, (3,000 calls - 1,000 calls) / 2,000, for each
# runtime named (default lua5.4), building the tables both ways echo_floor.c offers: "api"
# (lua_pushlstring and lua_rawset per field) and "constructor" (a Lua function compiled once for
# the keys). Compare with bench/suites/cg.lua --kind=echo10's figure in
# bench/budgets.txt, which adds the hand-off and vmpool's codec to these passes.
#
# Usage: bench/probes/echo_floor.sh [lua5.4] [lua5.1] [luajit]
#        BENCH_QUICK=1 bench/probes/echo_floor.sh   builds and runs it once without valgrind
#        (scripts/bench-smoke.sh), printing no figure
set -eu
cd "$(dirname "$0")/../.."
out=${TMPDIR:-/tmp}/vmpool-echo-floor
mkdir -p "$out"
[ $# -gt 0 ] || set -- lua5.4
for lua in "$@"; do
  case $lua in
    lua5.1) inc=/usr/include/lua5.1 ;;
    lua5.4) inc=/usr/include/lua5.4 ;;
    luajit) inc=/usr/include/luajit-2.1 ;;
    *) echo "echo_floor.sh: no include directory known for $lua (lua5.1, lua5.4, luajit)" >&2; exit 2 ;;
  esac
  mkdir -p "$out/$lua"
  # the module calls the runtime's own C API: the interpreter exports it, so no -llua
  cc -O2 -shared -fPIC -I"$inc" -o "$out/$lua/echo_floor.so" bench/probes/echo_floor.c
  if [ "${BENCH_QUICK:-0}" = 1 ]; then
    env -u LUA_INIT "$lua" -e "package.path = 'bench/lib/?.lua;' .. package.path
      package.cpath = '$out/$lua/?.so;' .. package.cpath
      assert(require('echo_floor').echo(require('benchlib').table10(), 10) == 10)
      assert(require('echo_floor').echo(require('benchlib').table10(), 10, 'constructor') == 10)"
    continue
  fi
  total() { # calls, mode
    rm -f "$out/$lua/cg.out"
    env -u LUA_INIT taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$out/$lua/cg.out" \
      "$lua" -e "package.path = 'bench/lib/?.lua;' .. package.path
        package.cpath = '$out/$lua/?.so;' .. package.cpath
        local n = require('echo_floor').echo(require('benchlib').table10(), $1, '$2')
        assert(n == 10, 'echo_floor: expected 10 fields, got ' .. tostring(n))" 2>/dev/null
    sed -n 's/^summary: //p' "$out/$lua/cg.out"
  }
  for mode in api constructor; do
    a=$(total 1000 $mode)
    b=$(total 3000 $mode)
    echo "$lua, $mode: $(( (b - a) / 2000 )) instructions per echo of a 10-field table"
  done
done
