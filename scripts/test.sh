#!/bin/sh
# Runs every test suite: Rust tests, the same under ThreadSanitizer, bounded fuzzing, then for each
# runtime the rock installed by LuaRocks, the busted specs against it and a short soak test; with
# LuaJIT also the nginx (OpenResty) integration suite (scripts/test-ngx.sh) and vmpool inside
# Neovim (scripts/test-nvim.sh); last, the packed release (make dist) installed into fresh trees as
# users would (scripts/install-check.sh): the binary rock on every runtime (INSTALL_RUNTIMES) with
# no Rust toolchain and no network, LuaJIT also inside nginx and Neovim, and the source rock on Lua
# 5.4 (SOURCE_RUNTIMES).
# Lua 5.5 is built from sources first (scripts/lua55.sh, through scripts/rock.sh), with the fuzz
# targets' seeds run against it (scripts/fuzz.sh seeds).
# Usage: scripts/test.sh [lua5.1 lua5.2 lua5.3 lua5.4 lua5.5 luajit]; TSAN=0, FUZZ_SECONDS=0, PORTABLE=0,
# SOAK_SECONDS=0, BUDGETS=0, BENCH_SMOKE=0 and BENCH_ADAPTERS=0 skip the TSan runs, fuzzing, the
# portable-sys fallback, the soak test, the instruction budgets (scripts/budgets.sh), the quick run
# of every benchmark script (scripts/bench-smoke.sh) and the adapters' short benchmark with its
# wake-up checks.
set -eu
cd "$(dirname "$0")/.."
runtimes=${*:-"lua5.1 lua5.2 lua5.3 lua5.4 lua5.5 luajit"}
echo "== cargo test"
cargo test --quiet --locked
# the Rust tests again on Lua 5.5, built in (mlua's vendored build of lua-src's sources)
case " $runtimes " in
  *" lua5.5 "*)
    echo "== cargo test on Lua 5.5"
    cargo test --quiet --locked --no-default-features --features lua55,mlua/vendored --target-dir target/test-lua55
    ;;
esac
# the bookkeeping's thread-safety under ThreadSanitizer (TSAN=0 skips)
if [ "${TSAN:-1}" != 0 ]; then scripts/tsan.sh; fi
# bounded fuzzing of the value decoder and chunk loading (FUZZ_SECONDS per target, 0 skips)
if [ "${FUZZ_SECONDS:-30}" != 0 ]; then
  scripts/fuzz.sh
  # Lua 5.5: every seed of the corpus once, the targets built with 5.5 inside
  case " $runtimes " in *" lua5.5 "*) FUZZ_LUA=lua55 scripts/fuzz.sh seeds ;; esac
fi
# the portable fallback of src/sys.rs, as systems other than Linux build it: the Rust tests and the
# busted suite on Lua 5.4 with the portable-sys feature (PORTABLE=0 skips)
if [ "${PORTABLE:-1}" != 0 ]; then
  echo "== cargo test --features portable-sys"
  cargo test --quiet --locked --features portable-sys
  echo "== lua5.4 with the portable-sys fallback: luarocks make, busted (luarocks test)"
  VMPOOL_CARGO_FEATURES=portable-sys scripts/rock.sh lua5.4
  grep -q "built for lua54,portable-sys" lua_modules/lua5.4/build.log
  ( LUA=lua5.4 && . scripts/luaenv.sh && vmpool_luarocks_config "$PWD/$VMPOOL_TREE" &&
    luarocks --lua-version=5.4 --tree "$VMPOOL_TREE" test rockspec/vmpool-scm-1.rockspec -- --output=utfTerminal )
fi
for LUA in $runtimes; do
  echo "== $LUA: luarocks make"
  scripts/rock.sh "$LUA"
  # the busted suite as `luarocks test` runs it (the rockspec's test section, rockspec/test.lua)
  echo "== $LUA: busted (luarocks test)"
  ( . scripts/luaenv.sh && vmpool_luarocks_config "$PWD/$VMPOOL_TREE" &&
    luarocks --lua-version="$VMPOOL_LUA_VERSION" --tree "$VMPOOL_TREE" test rockspec/vmpool-scm-1.rockspec -- --output=utfTerminal )
  # instructions per call against bench/budgets.txt, callgrind on one CPU (BUDGETS=0 skips)
  if [ "${BUDGETS:-1}" != 0 ] && grep -q " $LUA " bench/budgets.txt; then
    echo "== $LUA: instruction budgets (scripts/budgets.sh)"
    scripts/install-deps.sh valgrind util-linux
    scripts/budgets.sh "$LUA"
  fi
  # every outcome under load, balanced counters, nothing leaked (SOAK_SECONDS, 0 skips); the
  # proof that the leak check catches leaks runs with the first runtime only
  if [ "${SOAK_SECONDS:-20}" != 0 ]; then
    proof=0
    [ "$LUA" = "${runtimes%% *}" ] && proof=${SOAK_LEAK_PROOF:-1}
    SOAK_LEAK_PROOF=$proof scripts/soak.sh "$LUA"
  fi
  if [ "$LUA" = luajit ]; then
    echo "== luajit: nginx integration (spec/ngx)"
    scripts/test-ngx.sh
    echo "== luajit: vmpool inside Neovim through vim.loop (spec/nvim)"
    scripts/test-nvim.sh
  fi
done
# every benchmark script once in its quick mode, so none can rot (BENCH_SMOKE=0 skips)
case " $runtimes " in
  *" lua5.4 "*) if [ "${BENCH_SMOKE:-1}" != 0 ]; then scripts/bench-smoke.sh lua5.4; fi ;;
esac
# the event-loop adapters' benchmark in its short mode, once (on Lua 5.4 if it was built, else the
# first runtime): it fails only on the wake-up counts (BENCH_ADAPTERS=0 skips)
if [ "${BENCH_ADAPTERS:-1}" != 0 ]; then
  bench_lua=${runtimes%% *}
  case " $runtimes " in *" lua5.4 "*) bench_lua=lua5.4 ;; esac
  echo "== $bench_lua: bench/probes/adapters.lua --short (wake-ups per call, main-thread CPU while waiting)"
  ( LUA=$bench_lua && . scripts/luaenv.sh && "$bench_lua" bench/probes/adapters.lua --short )
fi
echo "== packed rocks: make dist, then luarocks install into fresh trees (binary rock: no Rust, no network)"
scripts/dist.sh
# shellcheck disable=SC2086 # a list of runtimes
scripts/install-check.sh ${INSTALL_RUNTIMES:-$runtimes}
