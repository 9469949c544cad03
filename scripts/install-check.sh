#!/bin/sh
# Installs the packed rocks of dist/ (scripts/dist.sh) the way users would, each into a fresh tree
# from an empty temporary directory, and runs a smoke test from that tree only:
# - the binary rock, for every runtime given (default lua5.1 lua5.2 lua5.3 lua5.4 lua5.5 luajit), with
#   `luarocks --lua-version=5.x install --server=<dist> vmpool` in an environment with no Rust and
#   no network: PATH=/usr/bin:/bin, CARGO_HOME and RUSTUP_HOME empty directories, LuaRocks'
#   compiler variables set to /bin/false, nothing else of the caller's environment, and (as root) a
#   network namespace of its own with only loopback up (`unshare -n`; where that is not permitted
#   the check says so and runs with the network). Then spec/install/smoke.lua on the runtime, and
#   for luajit the same calls inside nginx (spec/install/smoke_ngx.conf) and Neovim
#   (spec/install/smoke_nvim.lua);
# - the source rock, for SOURCE_RUNTIMES (default lua5.4; empty skips): `luarocks install
#   <the .src.rock>`, which builds with cargo, then the same smoke test.
# Lua 5.5 is the one scripts/lua55.sh built into target/lua5.5 (LuaRocks is told where, as
# scripts/luaenv.sh does; the smoke test finds cqueues and luv built for it there).
# Usage: scripts/install-check.sh [runtimes]
set -eu
cd "$(dirname "$0")/.."
root=$PWD
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
srcrock="$root/dist/vmpool-$version-1.src.rock"
lua55="$root/target/lua5.5"
binrock="$root/dist/vmpool-$version-1.$(luarocks config arch).rock"

# runtime name as vmpool.runtime says it, and the LuaRocks version slot
runtime_of() { case "$1" in luajit) echo LuaJIT ;; *) echo "Lua ${1#lua}" ;; esac; }
slot_of() { case "$1" in luajit) echo 5.1 ;; *) echo "${1#lua}" ;; esac; }

# nginx with the installed tree (LuaJIT): TMP holds the tree; answers GET /smoke
ngx_smoke() {
  tmp=$1
  prefix="$tmp/ngx"
  mkdir -p "$prefix/conf" "$prefix/logs"
  # in a network namespace of our own every port is free; otherwise ask the kernel for one
  port=8080
  [ "${VMPOOL_NETNS:-0}" = 1 ] || port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  sed -e "s|@CPATH@|$tmp/tree/lib/lua/5.1/?.so|" -e "s|@PORT@|$port|" "$root/spec/install/smoke_ngx.conf" >"$prefix/conf/nginx.conf"
  # nginx's workers run as nobody when started by root: they read the tree
  chmod 755 "$tmp"
  /usr/sbin/nginx -p "$prefix/" -c conf/nginx.conf
  body=$(curl -sS --retry 30 --retry-connrefused --retry-delay 1 --max-time 60 "http://127.0.0.1:$port/smoke" 2>&1) || true
  pid=$(cat "$prefix/logs/nginx.pid" 2>/dev/null || true)
  if [ -n "$pid" ]; then
    kill -QUIT "$pid" 2>/dev/null || true
    # the master's pid file goes when it has exited (bounded: 10 s, then KILL)
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  case "$body" in
    "ok $version LuaJIT jit in pool states: true"*) echo "nginx: $body" ;;
    *)
      echo "$body" >&2
      cat "$prefix/logs/error.log" >&2 || true
      echo "vmpool: the smoke test inside nginx failed (response and error.log above)" >&2
      return 1
      ;;
  esac
}

# One runtime's install and smoke tests, in the directory TMP: FROM is binary or source.
check() {
  LUA=$1 from=$2 tmp=$3
  slot=$(slot_of "$LUA")
  cd "$tmp"
  {
    # LuaJIT is a 5.1 interpreter with its own headers (only a build from source reads this)
    if [ "$LUA" = luajit ]; then
      echo 'lua_interpreter = "luajit"'
      echo 'variables = { LUA_DIR = "/usr", LUA_BINDIR = "/usr/bin", LUA_INCDIR = "/usr/include/luajit-2.1" }'
    fi
    if [ "$LUA" = lua5.5 ]; then
      echo "lua_interpreter = \"lua5.5\""
      echo "variables = { LUA_DIR = \"$lua55\", LUA_BINDIR = \"$lua55/bin\", LUA_INCDIR = \"$lua55/include\" }"
    fi
    # a binary rock compiles nothing: a compiler LuaRocks would call fails
    if [ "$from" = binary ]; then echo 'variables = { CC = "/bin/false", LD = "/bin/false", CXX = "/bin/false", MAKE = "/bin/false" }'; fi
  } >config.lua
  case "$from" in
    binary) what="--server=$root/dist vmpool" ;;
    source) what=$srcrock ;;
  esac
  echo "== $LUA: luarocks --lua-version=$slot install $what ($from rock, fresh tree)"
  # shellcheck disable=SC2086 # $what is two words for the server form
  if ! LUAROCKS_CONFIG="$tmp/config.lua" luarocks --lua-version="$slot" --tree="$tmp/tree" install $what >install.log 2>&1; then
    cat install.log >&2
    echo "vmpool: installing the $from rock failed for $LUA (log above; kept in $tmp)" >&2
    return 1
  fi
  if [ "$from" = binary ] && ! grep -q "Installing .*$(basename "$binrock")" install.log; then
    cat install.log >&2
    echo "vmpool: luarocks did not install the binary rock for $LUA (log above)" >&2
    return 1
  fi
  for types in vmpool.lua vmpool/luv.lua vmpool/cqueues.lua; do
    types="$tmp/tree/lib/luarocks/rocks-$slot/vmpool/$version-1/types/$types"
    [ -f "$types" ] || { echo "vmpool: the rock did not install its editor annotations at $types" >&2; return 1; }
  done
  # the fresh tree first, then the system's directories (cqueues, luv); no lua_modules/, no clone
  interpreter=/usr/bin/$LUA
  [ "$LUA" = lua5.5 ] && interpreter=$lua55/bin/lua5.5
  LUA_CPATH="$tmp/tree/lib/lua/$slot/?.so;;" LUA_CPATH_5_5="$tmp/tree/lib/lua/5.5/?.so;$lua55/lib/lua/5.5/?.so" \
    LUA_PATH_5_5="$lua55/share/lua/5.5/?.lua;/usr/share/lua/5.4/?.lua;/usr/share/lua/5.4/?/init.lua;;" \
    "$interpreter" "$root/spec/install/smoke.lua" "$version" "$(runtime_of "$LUA")"
  if [ "$from" = binary ]; then
    # without its build for this runtime, the loader says so at require (and nothing else loads)
    build="$tmp/tree/lib/lua/$slot/vmpool/build/$LUA.so"
    mv "$build" "$build.away"
    LUA_CPATH="$tmp/tree/lib/lua/$slot/?.so" LUA_CPATH_5_5="$tmp/tree/lib/lua/5.5/?.so" "$interpreter" - "$build" \
      "$(runtime_of "$LUA")" <<'CHECK'
local ok, err = pcall(require, "vmpool")
local want = "vmpool: this binary rock has no working build for " .. arg[2] .. ": " .. arg[1] .. " ("
assert(not ok and err:sub(1, #want) == want, "require without the build: " .. tostring(err))
print("without its " .. arg[2] .. " build the rock refuses to load: " .. err:match("^[^(]*"))
CHECK
    mv "$build.away" "$build"
  fi
  if [ "$LUA" = luajit ] && [ "$from" = binary ]; then
    ngx_smoke "$tmp"
    VMPOOL_CPATH="$tmp/tree/lib/lua/5.1/?.so" timeout 120 nvim --headless -u NONE -i NONE -n -c "luafile $root/spec/install/smoke_nvim.lua" </dev/null
  fi
}

# the sealed half: this script again, in the reduced environment (see the top)
if [ "${VMPOOL_SEALED:-0}" = 1 ]; then
  [ "${VMPOOL_NETNS:-0}" = 1 ] && ip link set lo up
  if command -v cargo >/dev/null 2>&1 || command -v rustc >/dev/null 2>&1; then
    echo "vmpool: the sealed environment still finds cargo or rustc on $PATH" >&2
    exit 1
  fi
  check "$1" binary "$2"
  exit 0
fi

for rock in "$binrock" "$srcrock"; do
  [ -f "$rock" ] || { echo "vmpool: $rock is missing; run make dist first" >&2; exit 1; }
done
netns=""
if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
  netns="unshare -n"
else
  echo "vmpool: unshare -n is not permitted here (it needs root): the binary rocks are installed with the network reachable"
fi
empty=$(mktemp -d /tmp/vmpool-empty.XXXXXX)
for LUA in ${*:-lua5.1 lua5.2 lua5.3 lua5.4 lua5.5 luajit}; do
  if [ "$LUA" = lua5.5 ]; then scripts/lua55.sh; fi
  tmp=$(mktemp -d /tmp/vmpool-install.XXXXXX)
  mkdir "$tmp/home"
  # shellcheck disable=SC2086 # $netns is a command and its option, or nothing
  env -i PATH=/usr/bin:/bin HOME="$tmp/home" LANG=C.UTF-8 CARGO_HOME="$empty" RUSTUP_HOME="$empty" \
    VMPOOL_SEALED=1 VMPOOL_NETNS=$([ -n "$netns" ] && echo 1 || echo 0) \
    $netns /bin/sh "$root/scripts/install-check.sh" "$LUA" "$tmp" || {
    echo "vmpool: the binary rock's check failed for $LUA (files kept in $tmp)" >&2
    exit 1
  }
  rm -rf "$tmp"
done
rmdir "$empty"
for LUA in ${SOURCE_RUNTIMES-lua5.4}; do
  tmp=$(mktemp -d /tmp/vmpool-install.XXXXXX)
  (check "$LUA" source "$tmp") || { echo "vmpool: the source rock's check failed for $LUA (files kept in $tmp)" >&2; exit 1; }
  rm -rf "$tmp"
done
