#!/bin/sh
# Runs every test suite: Rust unit tests, then for each runtime the rock installed by LuaRocks and
# the busted specs against it; with LuaJIT also the nginx (OpenResty) integration suite
# (scripts/test-ngx.sh). Usage: scripts/test.sh [lua5.1 lua5.4 luajit]
set -eu
cd "$(dirname "$0")/.."
runtimes=${*:-"lua5.1 lua5.4 luajit"}
echo "== cargo test"
cargo test --quiet --locked
for LUA in $runtimes; do
  echo "== $LUA: luarocks make"
  scripts/rock.sh "$LUA"
  echo "== $LUA: busted"
  ( . scripts/luaenv.sh && busted --lua="$LUA" --output=utfTerminal spec )
  if [ "$LUA" = luajit ]; then
    echo "== luajit: nginx integration (spec/ngx)"
    scripts/test-ngx.sh
  fi
done
