#!/bin/sh
# Installs the Debian packages vmpool needs (only the missing ones). Runs apt-get as root, or
# through sudo. Usage: scripts/install-deps.sh [extra-package ...]
# The extras are what optional tools add for themselves, never CI: valgrind and util-linux for the
# benchmarks (bench/run.sh), cmake, g++ and clang for building the peers (bench/peers/build.sh).
set -eu
pkgs="lua5.1 liblua5.1-0-dev lua5.2 liblua5.2-dev lua5.3 liblua5.3-dev lua5.4 liblua5.4-dev luajit2 libluajit2-5.1-dev luarocks lua-busted
      lua-check lua-socket lua-posix lua-cqueues lua-luv nginx libnginx-mod-http-lua lua-resty-core wrk procps
      pkg-config gcc make git zip unzip python3 $*"
# binutils (objdump): make dist checks the binary rock's libraries; curl, iproute2: the binary
# rock's smoke test in nginx, inside a network namespace with only loopback (scripts/install-check.sh)
pkgs="$pkgs binutils curl iproute2"
# m4, libssl-dev, libuv1-dev: cqueues and luv built for Lua 5.5 (scripts/lua55.sh)
pkgs="$pkgs m4 libssl-dev libuv1-dev"
missing=""
# lua-cjson: spec/null_spec.lua checks that JSON nulls cross between states
pkgs="$pkgs lua-cjson"
# python3-prometheus-client: the specs parse vmpool.metrics() with a real Prometheus text parser
# (spec/metrics_spec.lua, spec/ngx/metrics_ngx.lua)
pkgs="$pkgs python3-prometheus-client"
# lua-luv and lua-cqueues (above): the event-loop adapters' specs (spec/luv_spec.lua, spec/cqueues_spec.lua);
# neovim (0.7, LuaJIT): vmpool inside the editor through vim.loop (scripts/test-nvim.sh)
pkgs="$pkgs neovim"
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "vmpool: installing Debian packages:$missing"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
  # Debian starts its default nginx service on install; the project runs its own instances on
  # their own ports, so stop that one (and only that one)
  if command -v systemctl >/dev/null 2>&1; then $sudo systemctl disable --now nginx >/dev/null 2>&1 || true; fi
  if [ -s /run/nginx.pid ]; then $sudo sh -c 'kill -QUIT "$(cat /run/nginx.pid)"' 2>/dev/null || true; fi
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "vmpool: Rust (cargo >= 1.88) is needed; install it with rustup (https://rustup.rs)" >&2
  exit 1
fi
