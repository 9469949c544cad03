#!/bin/sh
# Builds Lua 5.5 and what busted and the specs need on it into target/lua5.5/, from sources the
# project reaches (Debian 12 has no Lua 5.5):
# - the library: Lua 5.5.1 as the lua-src crate carries it (crates.io: `cargo fetch` of
#   scripts/lua55/Cargo.toml, locked to lua-src 551.1.0);
# - the interpreter's front end, lua.c, which lua-src leaves out: Lua 5.4.4's from Debian's lua5.4
#   source package (its standalone interpreter uses only the public API, unchanged in 5.5 but
#   for the writing macros, now in llimits.h, which it is given);
# - the C modules, built against the 5.5 headers from Debian source packages: lfs
#   (lua-filesystem; its version check stops at 5.4 and is widened, the code is the same),
#   term.core (lua-term), cjson (lua-cjson), socket.core and mime.core (luasocket), _cqueues
#   (lua-cqueues, with its bundled compat-5.3's version check widened and the 5.3 API macros 5.5
#   dropped, scripts/lua55/compat53-apis.h; needs m4 and libssl-dev) and luv (lua-luv, against
#   the system's libuv1-dev); system.core (busted's clock) from scripts/lua55/system_core.c,
#   since the mirror did not serve lua-system's source. Each comes from Debian 12, or from
#   Debian 13 where the mirror lacks 12's tarball (lua-luv);
# - Debian's pure-Lua modules (busted, Penlight, luassert, ...) are used from /usr/share/lua/5.4,
#   except the files Lua 5.5 cannot compile because they assign to a loop's control variable,
#   rewritten into target/lua5.5/share/lua/5.5 (scripts/lua55/loopvars.lua).
# Debian sources come through apt-get source with a private deb-src list (nothing in /etc/apt
# changes). Done once: a second run finds target/lua5.5/.built and returns. scripts/luaenv.sh with
# LUA=lua5.5 puts the interpreter on PATH and the modules on its paths.
# Usage: scripts/lua55.sh
set -eu
cd "$(dirname "$0")/.."
root=$PWD
out=$root/target/lua5.5
stamp="$out/.built"
# what the build depends on: this script and its helpers
want=$(cat scripts/lua55.sh scripts/lua55/* | md5sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "== building Lua 5.5 and busted's C modules into $out (scripts/lua55.sh)"
rm -rf "$out/bin" "$out/include" "$out/lib" "$out/share" "$out/build" "$stamp"
mkdir -p "$out/bin" "$out/include" "$out/lib/lua/5.5" "$out/share/lua/5.5" "$out/build" "$out/src"

# Lua 5.5.1 from lua-src
cargo fetch --locked --manifest-path scripts/lua55/Cargo.toml >/dev/null 2>&1 || {
  cargo fetch --locked --manifest-path scripts/lua55/Cargo.toml
  echo "vmpool: cargo could not fetch lua-src (crates.io), which carries the Lua 5.5 sources" >&2
  exit 1
}
lua_src=$(cargo metadata --locked --offline --format-version 1 --manifest-path scripts/lua55/Cargo.toml |
  python3 -c 'import json, os, sys
m = json.load(sys.stdin)
print(next(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"] == "lua-src"))')
lua_dir=$(ls -d "$lua_src"/lua-5.5.*)
cp "$lua_dir"/*.h "$out/include/"
# LuaRocks 3.8 checks LUA_INCDIR by reading lua.h for the text "LUA_VERSION_NUM 505"; 5.5's lua.h
# computes the number, so its copy says it in a comment (nothing else changes)
printf '\n/* LUA_VERSION_NUM 505 (for LuaRocks 3.8, whose header check reads this file as text) */\n' >>"$out/include/lua.h"

# Debian source packages, through a private apt configuration; the upstream tarball is all that
# is used (the mirror sometimes lacks a package's Debian part, so a failed download of that part
# is not an error when the tarball arrived)
apt_dir="$out/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
printf 'deb-src http://deb.debian.org/debian bookworm main\ndeb-src http://deb.debian.org/debian trixie main\n' \
  >"$apt_dir/sources.list"
# (one word per option: the paths under target/ have no spaces)
apt_opts="-o Dir::Etc::SourceList=$apt_dir/sources.list -o Dir::Etc::SourceParts=/dev/null
  -o Dir::State::Lists=$apt_dir/lists -o Dir::Cache=$apt_dir/cache -o APT::Sandbox::User=root -qq"
if ! cmp -s "$apt_dir/sources.list" "$apt_dir/updated"; then
  # shellcheck disable=SC2086
  apt-get $apt_opts update >/dev/null
  cp "$apt_dir/sources.list" "$apt_dir/updated"
fi
source_dir() { # source_dir PACKAGE: unpacks its upstream tarball once, prints the directory
  pkg=$1
  tarball=$(ls "$out/src/${pkg}_"*.orig.tar.* 2>/dev/null | head -n 1)
  for suite in bookworm trixie; do
    [ -z "$tarball" ] || break
    # shellcheck disable=SC2086
    (cd "$out/src" && apt-get $apt_opts source --download-only "$pkg/$suite" >"$out/src/$pkg.log" 2>&1) || true
    tarball=$(ls "$out/src/${pkg}_"*.orig.tar.* 2>/dev/null | head -n 1)
  done
  if [ -z "$tarball" ]; then
    cat "$out/src/$pkg.log" >&2
    echo "vmpool: could not fetch the source of Debian's $pkg (Debian 12 or 13; above)" >&2
    exit 1
  fi
  dir="$out/build/$pkg"
  if [ ! -d "$dir" ]; then
    mkdir -p "$dir"
    tar -xf "$tarball" -C "$dir" --strip-components=1
  fi
  echo "$dir"
}

cflags="-O2 -fPIC -std=gnu99 -DLUA_USE_LINUX -I$out/include"
module() { # module NAME.so SOURCES...: a C module in lib/lua/5.5/ (NAME with / for submodules; their
  # own code, so their warnings are not ours to act on: -w)
  target="$out/lib/lua/5.5/$1"
  shift
  mkdir -p "$(dirname "$target")"
  # shellcheck disable=SC2086 # $cflags is a list of flags
  gcc $cflags -w -shared -o "$target" "$@"
}

# the library (lib/liblua5.5.a, which bench/report/build.sh also links into its symbolized host) and the
# interpreter, lua.c over all of it, exporting the API for the C modules (-E)
mkdir -p "$out/build/obj"
for c in "$lua_dir"/*.c; do
  # shellcheck disable=SC2086 # $cflags is a list of flags
  gcc $cflags -c -o "$out/build/obj/$(basename "$c" .c).o" "$c"
done
ar rcs "$out/lib/liblua5.5.a" "$out"/build/obj/*.o
lua54=$(source_dir lua5.4)
cp "$lua54/src/lua.c" "$out/build/lua.c"
# shellcheck disable=SC2086
gcc $cflags -include llimits.h -o "$out/bin/lua5.5" "$out/build/lua.c" \
  -Wl,-E -Wl,--whole-archive "$out/lib/liblua5.5.a" -Wl,--no-whole-archive -lm -ldl

lfs=$(source_dir lua-filesystem)
sed 's/LUA_VERSION_NUM <= 504/LUA_VERSION_NUM <= 505/' "$lfs/src/lfs.c" >"$out/build/lfs.c"
module lfs.so -I"$lfs/src" "$out/build/lfs.c"
term=$(source_dir lua-term)
module term/core.so "$term/core.c"
cjson=$(source_dir lua-cjson)
module cjson.so "$cjson/lua_cjson.c" "$cjson/strbuf.c" "$cjson/fpconv.c"
socket=$(source_dir luasocket)
module socket/core.so "$socket"/src/luasocket.c "$socket"/src/timeout.c "$socket"/src/buffer.c \
  "$socket"/src/io.c "$socket"/src/auxiliar.c "$socket"/src/compat.c "$socket"/src/options.c \
  "$socket"/src/inet.c "$socket"/src/except.c "$socket"/src/select.c "$socket"/src/tcp.c \
  "$socket"/src/udp.c "$socket"/src/usocket.c
module mime/core.so "$socket/src/mime.c" "$socket/src/compat.c"
module system/core.so scripts/lua55/system_core.c
cqueues=$(source_dir lua-cqueues)
sed -i 's/LUA_VERSION_NUM > 504$/LUA_VERSION_NUM > 505/' "$cqueues/vendor/compat53/c-api/compat-5.3.h"
cp "$cqueues/config.h.guess" "$cqueues/src/config.h"
(cd "$cqueues/src" && m4 errno.c.m4 >errno.c)
(cd "$cqueues/src" && module _cqueues.so -D_REENTRANT -D_THREAD_SAFE -D_GNU_SOURCE -DCOMPAT53_PREFIX=cqueues \
  -DCQUEUES_VENDOR='"debian"' -DCQUEUES_VERSION=20200726L -DCQUEUES_COMMIT='"rel-20200726"' \
  -I. -I../vendor/compat53/c-api -include lua.h -include lauxlib.h -include "$root/scripts/lua55/compat53-apis.h" \
  cqueues.c socket.c errno.c signal.c thread.c notify.c dns.c lib/socket.c lib/dns.c lib/notify.c \
  ../vendor/compat53/c-api/compat-5.3.c -lssl -lcrypto -lpthread)
luv=$(source_dir lua-luv)
module luv.so "$luv/src/luv.c" -luv

# Debian's pure-Lua modules that 5.5 cannot compile as they are
"$out/bin/lua5.5" scripts/lua55/loopvars.lua /usr/share/lua/5.4 "$out/share/lua/5.5" \
  pl busted luassert say cliargs cliargs.lua term system mediator.lua dkjson.lua socket socket.lua ltn12.lua mime.lua \
  cqueues cqueues.lua

echo "$want" >"$stamp"
echo "vmpool: built $("$out/bin/lua5.5" -v 2>&1 | cut -d' ' -f1-2) into $out"
