#!/bin/sh
# Runs the soak test (spec/soak/soak.lua) for each runtime, SOAK_SECONDS seconds each (default 20: the
# CI variant; the full run is `SOAK_SECONDS=60 scripts/soak.sh`), against the count-alloc build of
# the module (its counting allocator is what the leak check reads), built here into
# target/soak-<feature>/ and installed in lua_modules/<LUA>-count/.
# Then, on the first runtime, it proves the leak check works: a soak that leaks one call record,
# and one that leaks one state, every 1000 calls must fail with a leak (SOAK_LEAK_PROOF=0 skips).
# Usage: scripts/soak.sh [runtimes]
set -eu
cd "$(dirname "$0")/.."
runtimes=${*:-"lua5.1 lua5.2 lua5.3 lua5.4 lua5.5 luajit"}
seconds=${SOAK_SECONDS:-20}
# glibc's per-thread arenas keep memory freed by other threads' large allocations; two arenas keep
# the RSS figures (printed as information) comparable between runs
export MALLOC_ARENA_MAX=2
offline=""
[ -d vendor ] && offline="--offline"

# Lua 5.5 is the one scripts/lua55.sh builds (see scripts/luaenv.sh)
case " $runtimes " in
  *" lua5.5 "*)
    scripts/lua55.sh
    PATH="$PWD/target/lua5.5/bin:$PATH"
    ;;
esac

# build_count LUA: the count-alloc module for LUA, in lua_modules/LUA-count/vmpool.so
build_count() {
  feature=$("$1" -e 'if jit then print("luajit") else print(({["Lua 5.1"]="lua51",["Lua 5.2"]="lua52",["Lua 5.3"]="lua53",["Lua 5.4"]="lua54",["Lua 5.5"]="lua55"})[_VERSION] or "?") end')
  cargo build --quiet --release --locked $offline --no-default-features \
    --features "$feature,module,count-alloc" --target-dir "target/soak-$feature"
  mkdir -p "lua_modules/$1-count"
  # install(1) writes a new file: never overwrite a .so a running process may have loaded
  install -m 0755 "target/soak-$feature/release/libvmpool.so" "lua_modules/$1-count/vmpool.so"
}

# soak LUA SECONDS: runs the soak with the count-alloc module first on LUA_CPATH
soak() {
  LUA_CPATH="$PWD/lua_modules/$1-count/?.so;;" LUA_CPATH_5_5="$PWD/lua_modules/$1-count/?.so;;" "$1" spec/soak/soak.lua "$2"
}

first=""
for LUA in $runtimes; do
  echo "== $LUA: soak ${seconds}s"
  build_count "$LUA"
  soak "$LUA" "$seconds"
  [ -n "$first" ] || first=$LUA
done

if [ "${SOAK_LEAK_PROOF:-1}" != 0 ] && [ -n "$first" ]; then
  for kind in call state; do
    echo "== $first: soak with one $kind leaked every 1000 calls (must fail with a leak)"
    log=$(mktemp)
    if SOAK_LEAK="$kind:1000" soak "$first" 8 >"$log" 2>&1; then
      cat "$log"
      echo "vmpool: the soak did not catch a leak of one $kind every 1000 calls" >&2
      rm -f "$log"
      exit 1
    fi
    if ! grep -q "^soak: FAILED: leak: " "$log"; then
      cat "$log"
      echo "vmpool: the soak leaking one $kind every 1000 calls failed, but not with a leak" >&2
      rm -f "$log"
      exit 1
    fi
    grep "^soak: FAILED: leak: " "$log"
    rm -f "$log"
  done
fi
