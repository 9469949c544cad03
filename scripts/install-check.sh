#!/bin/sh
# Installs the packed rock (dist/, from scripts/dist.sh) the way a user would, with no clone around:
# from an empty temporary directory, into a fresh tree, then requires vmpool from that tree only
# and makes a call. INSTALL_FROM says how: `server` (luarocks install --server=<dist> vmpool, the
# default), `file` (luarocks install <the .src.rock>), or both ("server file"). The event-loop
# adapters ship inside the library: `require "vmpool.luv"` and `"vmpool.cqueues"` from the fresh
# tree, with the system's luv and cqueues (Debian's lua-luv, lua-cqueues) after it on the path.
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
    for types in vmpool.lua vmpool/luv.lua vmpool/cqueues.lua; do
      types="$tmp/tree/lib/luarocks/rocks-$VMPOOL_LUA_VERSION/vmpool/$version-1/types/$types"
      if [ ! -f "$types" ]; then
        echo "vmpool: the rock did not install its editor annotations at $types" >&2
        exit 1
      fi
    done
    # only the fresh tree on the C path (no ';;': no system directory, no lua_modules/)
    LUA_CPATH="$tmp/tree/lib/lua/$VMPOOL_LUA_VERSION/?.so" "$LUA" - "$version" <<'CHECK'
local vmpool = require "vmpool"
assert(vmpool._VERSION == arg[1], "installed version " .. tostring(vmpool._VERSION) .. ", expected " .. arg[1])
local pool = vmpool.new { core = 1 }
pool:compile("check", "function add(a, b) return a + b end")
local sum = pool:invoke("check", "add", 2, 3)
assert(sum == 5, "pool:invoke returned " .. tostring(sum))
pool:close()
-- the adapters are in the library; without luv on the path the adapter says what it needs
local ok, err = pcall(require, "vmpool.luv")
assert(not ok and err:find("vmpool: vmpool.luv needs the luv module", 1, true), "require 'vmpool.luv': " .. tostring(err))
print("vmpool " .. vmpool._VERSION .. " on " .. vmpool.runtime .. ": installed and working")
CHECK
    # the adapters from the fresh tree, the loops from the system's directories (after it)
    LUA_CPATH="$tmp/tree/lib/lua/$VMPOOL_LUA_VERSION/?.so;;" "$LUA" - <<'CHECK'
local vluv = require "vmpool.luv" -- before vmpool: found as luaopen_vmpool_luv in vmpool.so
local vcq = require "vmpool.cqueues"
local vmpool = require "vmpool"
local pool = vmpool.new { core = 1 }
pool:compile("check", "function add(a, b) return a + b end")
local got = {}
vluv.spawn(function() got.luv = pool:co_invoke("check", "add", 1, 2) end)
vluv.loop.run()
local cq = require("cqueues").new()
cq:wrap(function() got.cqueues = pool:co_invoke("check", "add", 3, 4) end)
assert(cq:loop())
assert(got.luv == 3 and got.cqueues == 7, "the adapters returned " .. tostring(got.luv) .. ", " .. tostring(got.cqueues))
assert(vluv.stats().resumes == 1 and vcq.stats().resumes == 1)
pool:close()
print("vmpool.luv and vmpool.cqueues on " .. vmpool.runtime .. ": installed and working")
CHECK
    cd "$root"
    rm -rf "$tmp"
  done
done
