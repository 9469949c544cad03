#!/bin/sh
# Runs the soak test (bench/soak.lua) against the rock installed for each runtime, for SOAK_SECONDS
# seconds each (default 20: the CI variant; the full run is `SOAK_SECONDS=60 scripts/soak.sh`).
# Install the rocks first (scripts/rock.sh, or scripts/test.sh which calls this).
# Usage: scripts/soak.sh [runtimes]
set -eu
cd "$(dirname "$0")/.."
runtimes=${*:-"lua5.1 lua5.4 luajit"}
seconds=${SOAK_SECONDS:-20}
# glibc's per-thread arenas keep memory freed by other threads' large allocations, which makes RSS
# at quiet moments swing by tens of percent without any leak: two arenas keep it comparable
export MALLOC_ARENA_MAX=2
for LUA in $runtimes; do
  echo "== $LUA: soak ${seconds}s"
  ( . scripts/luaenv.sh && "$LUA" bench/soak.lua "$seconds" )
done
