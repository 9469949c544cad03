#!/bin/sh
# Starts or stops this example's nginx, wherever this directory is (copy it anywhere: nothing here
# refers to the vmpool repository). The rock comes from where LuaRocks installed it for Lua 5.1,
# the ABI of the LuaJIT that ngx_lua runs (`luarocks --lua-version=5.1 install vmpool`).
# Usage: [PORT=8080] [VMPOOL_TREE=DIR] ./run.sh start|stop
#   PORT        where the server listens on 127.0.0.1 (default 8080): the one setting
#   VMPOOL_TREE the tree given to `luarocks install --tree` (default: LuaRocks' own trees)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
port=${PORT:-8080}

case "${1:-}" in
  start)
    if [ -n "${VMPOOL_TREE:-}" ]; then
      cpath=$(luarocks --lua-version=5.1 --tree="$VMPOOL_TREE" path --lr-cpath)
    else
      cpath=$(luarocks --lua-version=5.1 path --lr-cpath)
    fi
    # find vmpool.so along that path now, so that a missing rock is reported here and not as a
    # failed require in logs/error.log
    found=""
    rest="$cpath;"
    while [ -n "$rest" ] && [ -z "$found" ]; do
      pattern=${rest%%;*}
      rest=${rest#*;}
      candidate=$(printf '%s' "$pattern" | sed 's/?/vmpool/')
      if [ -n "$pattern" ] && [ -f "$candidate" ]; then found=$candidate; fi
    done
    if [ -z "$found" ]; then
      echo "vmpool: vmpool.so is not on LuaRocks' Lua 5.1 path ($cpath); install the rock for LuaJIT with luarocks --lua-version=5.1 install vmpool (see README.md), or set VMPOOL_TREE to the tree it went into" >&2
      exit 1
    fi
    printf 'lua_package_cpath "%s;;";\n' "$cpath" >"$here/lua_cpath.conf"
    printf 'listen 127.0.0.1:%s;\n' "$port" >"$here/listen.conf"
    mkdir -p "$here/logs"
    nginx -p "$here/" -c nginx.conf
    echo "vmpool example: http://127.0.0.1:$port/ (vmpool from $found, logs in $here/logs/)"
    ;;
  stop)
    pid=$(cat "$here/logs/nginx.pid" 2>/dev/null || true)
    if [ -z "$pid" ]; then
      echo "vmpool example: not running (no $here/logs/nginx.pid)"
      exit 0
    fi
    nginx -p "$here/" -c nginx.conf -s quit
    # a graceful stop lets running requests finish: wait (up to 30 s) for the master to exit
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 300 ]; do
      sleep 0.1
      i=$((i + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "vmpool: nginx (pid $pid) is still stopping after 30 s; see $here/logs/error.log" >&2
      exit 1
    fi
    echo "vmpool example: stopped"
    ;;
  *)
    echo "usage: [PORT=8080] [VMPOOL_TREE=DIR] $0 start|stop" >&2
    exit 2
    ;;
esac
