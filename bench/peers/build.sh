#!/bin/sh
# Builds the peers the report measures against vmpool, Lua Lanes and effil, from their public
# sources, once per runtime, into $VMPOOL_PEERS/<lua>/ (outside this repository: nothing of theirs
# is committed). The report (`make report`) measures them when VMPOOL_PEERS points there, and says
# so when it does not.
#
#   git clone https://github.com/LuaLanes/lanes && git -C lanes checkout v3.17.2
#   git clone --recursive https://github.com/effil/effil
#   VMPOOL_PEERS=$HOME/vmpool-peers bench/peers/build.sh lanes effil [lua5.1 lua5.4 luajit]
#   VMPOOL_PEERS=$HOME/vmpool-peers make report
#
# Lanes 3.x is C; Lanes 4 is C++20 and needs <format> (GCC >= 13; Debian 12 has GCC 12, so use
# v3.17.2 there). effil is C++14 with sol2 in libs/sol (a git submodule pinned to a 2017 sol2: clone
# with --recursive) and builds with its own CMakeLists.txt, here with clang++ (GCC 12 rejects that
# sol2's string pushers as ambiguous); it supports Lua 5.1-5.3 and LuaJIT, not 5.4 (its
# src/cpp/utils.h stops the build), so it is skipped there with the reason written down.
# Layout of the result, per runtime:
#   <lua>/lib/    lanes/core.so (Lanes 3) or lanes_core.so (Lanes 4), effil.so   -> LUA_CPATH
#   <lua>/share/  lanes.lua                                                      -> LUA_PATH
#   <lua>/SOURCES what was built from where; <lua>/<peer>.skipped why a peer was not built
# Installs cmake, g++ and clang if missing (scripts/install-deps.sh; not needed by vmpool or its CI).
set -eu
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -lt 2 ]; then
  echo "usage: VMPOOL_PEERS=DIR bench/peers/build.sh LANES_SRC EFFIL_SRC [lua5.1 lua5.4 luajit]" >&2
  exit 2
fi
lanes_src=$(cd "$1" && pwd)
effil_src=$(cd "$2" && pwd)
shift 2
runtimes=${*:-"lua5.1 lua5.4 luajit"}
if [ -z "${VMPOOL_PEERS:-}" ]; then
  echo "bench/peers/build.sh: set VMPOOL_PEERS to the directory to build into (outside the repository)" >&2
  exit 2
fi
out=$(realpath -m "$VMPOOL_PEERS")
case "$out/" in
  "$repo"/*) echo "bench/peers/build.sh: VMPOOL_PEERS=$out is inside the repository; choose a directory outside it" >&2; exit 2 ;;
esac
mkdir -p "$out"
[ -f "$lanes_src/src/lanes.lua" ] || { echo "bench/peers/build.sh: $lanes_src is not a Lua Lanes source tree (no src/lanes.lua)" >&2; exit 2; }
[ -f "$effil_src/CMakeLists.txt" ] || { echo "bench/peers/build.sh: $effil_src is not an effil source tree (no CMakeLists.txt)" >&2; exit 2; }
[ -f "$effil_src/libs/sol/single/sol/sol.hpp" ] || [ -d "$effil_src/libs/sol/sol" ] || {
  echo "bench/peers/build.sh: $effil_src/libs/sol is empty: effil needs its sol2 submodule (git submodule update --init)" >&2
  exit 2
}
"$repo/scripts/install-deps.sh" cmake g++ clang
jobs=${PEERS_JOBS:-1}

for LUA in $runtimes; do
  case "$LUA" in
    lua5.1) inc=/usr/include/lua5.1 ;;
    lua5.2) inc=/usr/include/lua5.2 ;;
    lua5.3) inc=/usr/include/lua5.3 ;;
    lua5.4) inc=/usr/include/lua5.4 ;;
    luajit) inc=/usr/include/luajit-2.1 ;;
    *) echo "bench/peers/build.sh: unknown runtime $LUA (lua5.1 ... lua5.4, luajit)" >&2; exit 2 ;;
  esac
  [ -f "$inc/lua.h" ] || { echo "bench/peers/build.sh: no $inc/lua.h: install the runtime's -dev package" >&2; exit 1; }
  dest="$out/$LUA"
  rm -rf "$dest"
  mkdir -p "$dest/lib" "$dest/share" "$dest/build"

  echo "peers: Lua Lanes for $LUA"
  # the rockspec's builtin build: every source of src/ into one module, pthread linked
  if [ -f "$lanes_src/src/lanes.c" ]; then
    mkdir -p "$dest/lib/lanes"
    nice -n 10 cc -O2 -fPIC -shared -D_GNU_SOURCE -I"$lanes_src/src" -I"$inc" "$lanes_src"/src/*.c -lpthread \
      -o "$dest/lib/lanes/core.so"
  else
    nice -n 10 g++ -std=c++20 -O2 -fPIC -shared -I"$lanes_src/src" -I"$inc" "$lanes_src"/src/*.cpp -lpthread \
      -o "$dest/lib/lanes_core.so"
  fi
  cp "$lanes_src/src/lanes.lua" "$dest/share/lanes.lua"

  if [ "$LUA" = lua5.4 ] && grep -q "LUA_VERSION_NUM > 503" "$effil_src/src/cpp/utils.h" 2>/dev/null; then
    echo "peers: effil skipped for $LUA: it supports Lua 5.1-5.3 and LuaJIT"
    echo "effil supports Lua 5.1-5.3 and LuaJIT only (its src/cpp/utils.h stops a build for 5.4)" >"$dest/effil.skipped"
  else
    echo "peers: effil for $LUA"
    # effil's own CMake build, as its rockspec runs it (BUILD_ROCK: no Lua library linked)
    nice -n 10 cmake -S "$effil_src" -B "$dest/build/effil" -DCMAKE_BUILD_TYPE=Release -DBUILD_ROCK=yes \
      -DCMAKE_CXX_COMPILER="${PEERS_CXX:-clang++}" -DLUA_INCLUDE_DIR="$inc" >"$dest/build/effil.log" 2>&1 ||
      { cat "$dest/build/effil.log" >&2; exit 1; }
    nice -n 10 cmake --build "$dest/build/effil" -j "$jobs" >>"$dest/build/effil.log" 2>&1 ||
      { tail -n 40 "$dest/build/effil.log" >&2; exit 1; }
    cp "$dest/build/effil/effil.so" "$dest/lib/effil.so"
  fi

  {
    echo "lanes $lanes_src $(cd "$lanes_src" && ls ./*.rockspec 2>/dev/null | head -n 1)"
    echo "effil $effil_src"
  } >"$dest/SOURCES"
  # what the report will load: the same paths bench/report/run.lua gives the measuring processes
  LUA_PATH="$dest/share/?.lua;;" LUA_CPATH="$dest/lib/?.so;;" "$LUA" -e '
    local lanes = require("lanes").configure()
    local ok, effil = pcall(require, "effil")
    print(string.format("peers: '"$LUA"' loads Lua Lanes %s and %s", lanes.ABOUT and lanes.ABOUT.version or "?",
      ok and ("effil " .. tostring(effil.version)) or "no effil"))'
done
echo "peers: built into $out; run the report with VMPOOL_PEERS=$out"
