#!/bin/sh
# Called by the rockspec's build_command as: build.sh LUA_INTERPRETER LUA_INCDIR
# Asks the interpreter which runtime it is (LuaJIT reports _VERSION "Lua 5.1": look for `jit`),
# builds the matching cargo feature and leaves the module at target/rock/vmpool.so.
set -eu
lua="$1"
feature=$("$lua" -e 'if jit then print("luajit") else print((_VERSION:gsub("^Lua 5%.([1-5])$", "lua5%1"))) end')
case "$feature" in
  luajit|lua51|lua52|lua53|lua54|lua55) ;;
  *) echo "vmpool: $feature is not supported (use Lua 5.1 to 5.5 or LuaJIT)" >&2; exit 1 ;;
esac
if ! command -v cargo >/dev/null 2>&1; then
  echo "vmpool: cargo (Rust >= 1.88) is needed to build vmpool; see README.md" >&2
  exit 1
fi
offline=""
[ -d vendor ] && offline="--offline"
# VMPOOL_CARGO_FEATURES adds cargo features (e.g. portable-sys, the fallback scripts/test.sh tests)
extra=${VMPOOL_CARGO_FEATURES:+,$VMPOOL_CARGO_FEATURES}
cargo build --release --locked $offline --no-default-features --features "$feature,module$extra" --target-dir "target/$feature"
mkdir -p target/rock
# install(1) writes a new file: copying over a .so that a running process has loaded crashes it
install -m 0755 "target/$feature/release/libvmpool.so" target/rock/vmpool.so
echo "vmpool: built for $feature$extra"
