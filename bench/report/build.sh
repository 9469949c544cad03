#!/bin/sh
# Builds what the benchmarks run, for each runtime given (default: lua5.1 lua5.4 luajit):
#   - the rock, installed by LuaRocks into lua_modules/<LUA>/ (scripts/rock.sh), which the timed
#     runs use;
#   - a count-alloc build of the same module in bench/out/trees/count/<LUA>/vmpool.so (the counting
#     allocator costs a few atomic additions per allocation, so allocations are counted in separate
#     runs and never timed);
#   - the Rust ping-pong (cargo bench --bench pingpong), linked at bench/out/bin/pingpong;
#   - a symbolized Lua host per runtime for callgrind profiles (bench/report/lua-host.c, see there).
# Lua 5.5 is the one scripts/lua55.sh builds into target/lua5.5 (scripts/rock.sh runs it).
# Usage: bench/report/build.sh [lua5.1 lua5.4 lua5.5 luajit]
set -eu
cd "$(dirname "$0")/../.."
runtimes=${*:-"lua5.1 lua5.4 lua5.5 luajit"}
out=bench/out
mkdir -p "$out/bin" "$out/trees/count"
offline=""
[ -d vendor ] && offline="--offline"

for LUA in $runtimes; do
  case "$LUA" in
    lua5.1) feature=lua51 inc=/usr/include/lua5.1 lib=liblua5.1.a ;;
    lua5.4) feature=lua54 inc=/usr/include/lua5.4 lib=liblua5.4.a ;;
    lua5.5) feature=lua55 inc=$PWD/target/lua5.5/include lib=$PWD/target/lua5.5/lib/liblua5.5.a ;;
    luajit) feature=luajit inc=/usr/include/luajit-2.1 lib=libluajit-5.1.a ;;
    *) echo "bench: unknown runtime $LUA" >&2; exit 1 ;;
  esac
  scripts/rock.sh "$LUA"
  echo "bench: building the count-alloc module for $LUA"
  cargo build --quiet --release --locked $offline --no-default-features \
    --features "$feature,module,count-alloc" --target-dir "target/bench-count-$feature"
  mkdir -p "$out/trees/count/$LUA"
  # install(1) writes a new file: never overwrite a .so a running process may have loaded
  install -m 0755 "target/bench-count-$feature/release/libvmpool.so" "$out/trees/count/$LUA/vmpool.so"
  case "$lib" in /*) a=$lib ;; *) a="/usr/lib/x86_64-linux-gnu/$lib" ;; esac
  [ -f "$a" ] || a=$(find /usr/lib -name "$lib" 2>/dev/null | head -n 1)
  if [ -n "$a" ] && [ -f "$a" ]; then
    gcc -O2 -I"$inc" -o "$out/bin/$LUA-sym" bench/report/lua-host.c \
      -Wl,-E -Wl,--whole-archive "$a" -Wl,--no-whole-archive -lm -ldl
  else
    echo "bench: $lib not found: callgrind profiles of $LUA will not name Lua's functions" >&2
  fi
done

echo "bench: building the Rust ping-pong"
exe=$(cargo bench --locked $offline --bench pingpong --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
if [ -z "$exe" ]; then
  cargo bench --locked $offline --bench pingpong --no-run >&2
  echo "bench: cannot find the pingpong executable" >&2
  exit 1
fi
install -m 0755 "$exe" "$out/bin/pingpong"
echo "bench: built for $runtimes"
