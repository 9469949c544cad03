#!/bin/sh
# Runs the soak test (bench/soak.lua) against the rock installed for each runtime, for SOAK_SECONDS
# seconds each (default 10: the CI variant; the full run is `SOAK_SECONDS=60 scripts/soak.sh`, or
# `lua5.4 bench/soak.lua 60 2000000` with the rock on LUA_CPATH). Install the rocks first
# (scripts/rock.sh, or scripts/test.sh which calls this). Usage: scripts/soak.sh [runtimes]
set -eu
cd "$(dirname "$0")/.."
runtimes=${*:-"lua5.1 lua5.4 luajit"}
seconds=${SOAK_SECONDS:-10}
for LUA in $runtimes; do
  echo "== $LUA: soak ${seconds}s"
  ( . scripts/luaenv.sh && "$LUA" bench/soak.lua "$seconds" )
done
