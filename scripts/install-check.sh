#!/bin/sh
# Installs the packed rock (dist/, from scripts/dist.sh) the way a user would, with no clone around:
# from an empty temporary directory, into a fresh tree, then requires vmpool from that tree only
# and makes a call. INSTALL_FROM says how: `server` (luarocks install --server=<dist> vmpool, the
# default), `file` (luarocks install <the .src.rock>), or both ("server file").
# Usage: scripts/install-check.sh [runtimes] (default lua5.4)
set -eu
cd "$(dirname "$0")/.."
root=$PWD
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
rock="$root/dist/vmpool-$version-1.src.rock"
if [ ! -f "$rock" ]; then
  echo "vmpool: $rock is missing; run make dist first" >&2
  exit 1
fi
for LUA in ${*:-lua5.4}; do
  for from in ${INSTALL_FROM:-server}; do
    . scripts/luaenv.sh
    case "$from" in
      server) what="--server=$root/dist vmpool" ;;
      file) what="$rock" ;;
      *) echo "vmpool: INSTALL_FROM must list server and/or file (got '$from')" >&2; exit 1 ;;
    esac
    echo "== $LUA: luarocks install $what (fresh tree, no clone)"
    tmp=$(mktemp -d /tmp/vmpool-install.XXXXXX)
    cd "$tmp"
    vmpool_luarocks_config "$tmp"
    # shellcheck disable=SC2086 # $what is two words for the server form
    if ! luarocks --lua-version="$VMPOOL_LUA_VERSION" --tree="$tmp/tree" install $what >"$tmp/install.log" 2>&1; then
      cat "$tmp/install.log" >&2
      echo "vmpool: installing the packed rock failed for $LUA (log above; kept in $tmp)" >&2
      exit 1
    fi
    unset LUAROCKS_CONFIG
    types="$tmp/tree/lib/luarocks/rocks-$VMPOOL_LUA_VERSION/vmpool/$version-1/types/vmpool.lua"
    if [ ! -f "$types" ]; then
      echo "vmpool: the rock did not install its editor annotations at $types" >&2
      exit 1
    fi
    # only the fresh tree on the C path (no ';;': no system directory, no lua_modules/)
    LUA_CPATH="$tmp/tree/lib/lua/$VMPOOL_LUA_VERSION/?.so" "$LUA" - "$version" <<'CHECK'
local vmpool = require "vmpool"
assert(vmpool._VERSION == arg[1], "installed version " .. tostring(vmpool._VERSION) .. ", expected " .. arg[1])
local pool = vmpool.new { core = 1 }
pool:compile("check", "function add(a, b) return a + b end")
local sum = pool:invoke("check", "add", 2, 3)
assert(sum == 5, "pool:invoke returned " .. tostring(sum))
pool:close()
print("vmpool " .. vmpool._VERSION .. " on " .. vmpool.runtime .. ": installed and working")
CHECK
    cd "$root"
    rm -rf "$tmp"
  done
done
