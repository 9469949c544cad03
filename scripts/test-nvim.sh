#!/bin/sh
# vmpool inside Neovim: runs spec/nvim/offload_nvim.lua in `nvim --headless` (Debian's neovim
# 0.7, LuaJIT) with the rock built for LuaJIT (scripts/rock.sh luajit). Neovim 0.7 has no -l:
# the file runs through -c luafile and exits with 0 (passed) or 1 (failed).
set -eu
cd "$(dirname "$0")/.."
if [ ! -f lua_modules/luajit/lib/lua/5.1/vmpool.so ]; then
  echo "vmpool: build the rock for LuaJIT first (scripts/rock.sh luajit)" >&2
  exit 1
fi
command -v nvim >/dev/null 2>&1 || { echo "vmpool: nvim is missing (scripts/install-deps.sh installs neovim)" >&2; exit 1; }
VMPOOL_ROOT=$PWD VMPOOL_CPATH="$PWD/lua_modules/luajit/lib/lua/5.1/?.so" \
  timeout 180 nvim --headless -u NONE -i NONE -n -c "luafile spec/nvim/offload_nvim.lua" </dev/null
echo "vmpool: the Neovim test passed"
