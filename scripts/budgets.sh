#!/bin/sh
# The instruction budget check: callgrind on one CPU counts the instructions of one call of each
# probe in bench/budgets.txt (N2 calls minus N1 calls, divided by N2 - N1, so start-up cancels) and
# fails when a figure exceeds its budget by more than 3%, printing the figure, the budget and the
# command to profile it. The figure is the median of BUDGET_RUNS such differences (default 5): how
# the host and pool threads interleave under valgrind moves one difference by up to ~5% (co_invoke
# with 1,000 in flight on LuaJIT: 5,846-6,142 for one build), more than the 3% the check allows.
# The probe `ngx` (runtime luajit) is OpenResty's trivial request instead: event-loop instructions
# per request of /vmpool, nginx as one process under callgrind loaded by wrk
# (bench/ngx/instructions.lua), the median of BUDGET_NGX_RUNS runs (default 3) of BUDGET_NGX_SECONDS
# (default 4) each; it is skipped, saying so, where nginx or wrk is missing.
# Needs the rock built for each runtime (scripts/rock.sh <lua>).
# Usage: scripts/budgets.sh [lua5.4 ...] (default: the runtimes in bench/budgets.txt)
set -eu
cd "$(dirname "$0")/.."
N1=${BUDGET_N1:-1000}
N2=${BUDGET_N2:-3000}
RUNS=${BUDGET_RUNS:-5}
out=${TMPDIR:-/tmp}/vmpool-budgets.$$
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
want=" ${*:-} "
fail=0
# total instructions of one callgrind run, all threads
count() { # lua kind n
  dir=lua_modules/$1/lib/lua/$($1 -e 'print((_VERSION:gsub("Lua ", "")))')
  env -u LUA_INIT -u LUA_INIT_5_4 -u LUA_CPATH_5_4 LUA_CPATH="$dir/?.so;;" taskset -c 0 \
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p" "$1" bench/suites/cg.lua --kind="$2" --n="$3" \
    >"$out/log" 2>&1 || { cat "$out/log" >&2; echo "vmpool: budgets: callgrind of $1 $2 failed" >&2; exit 1; }
  sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' "$out/log" | tail -1
}
# event-loop instructions per request of OpenResty's /vmpool, one run of bench/ngx/instructions.lua
ngx_count() {
  ENDPOINTS=vmpool DURATION=${BUDGET_NGX_SECONDS:-4} SKIP_BUILD=1 bench/ngx/run.sh bench/ngx/instructions.lua \
    >"$out/ngx.log" 2>&1 || { cat "$out/ngx.log" >&2; echo "vmpool: budgets: bench/ngx/instructions.lua failed" >&2; exit 1; }
  n=$(sed -n 's|^/vmpool: \([0-9]*\) event-loop instructions per request.*|\1|p' "$out/ngx.log")
  [ -n "$n" ] || { cat "$out/ngx.log" >&2; echo "vmpool: budgets: no /vmpool figure in bench/ngx/instructions.lua's output" >&2; exit 1; }
  echo "$n"
}
while read -r probe lua budget; do
  case "$probe" in ''|'#'*) continue ;; esac
  case "$want" in "  ") ;; *" $lua "*) ;; *) continue ;; esac
  figures=
  i=0
  if [ "$probe" = ngx ]; then
    if ! command -v nginx >/dev/null 2>&1 || ! command -v wrk >/dev/null 2>&1; then
      echo "skip ngx $lua: nginx or wrk is missing (scripts/install-deps.sh installs them)"
      continue
    fi
    runs=${BUDGET_NGX_RUNS:-3}
    while [ $i -lt "$runs" ]; do
      figures="$figures $(ngx_count)"
      i=$((i + 1))
    done
    profile="KEEP=/tmp/ngx-dumps ENDPOINTS=vmpool SKIP_BUILD=1 bench/ngx/run.sh bench/ngx/instructions.lua (callgrind_annotate /tmp/ngx-dumps/vmpool.1-01)"
    what="event-loop instructions per request"
  else
    runs=$RUNS
    while [ $i -lt "$runs" ]; do
      a=$(count "$lua" "$probe" "$N1")
      b=$(count "$lua" "$probe" "$N2")
      figures="$figures $(( (b - a) / (N2 - N1) ))"
      i=$((i + 1))
    done
    profile="taskset -c 0 valgrind --tool=callgrind --separate-threads=yes $lua bench/suites/cg.lua --kind=$probe --n=$N2"
    what="instructions per call"
  fi
  figure=$(printf '%s\n' $figures | sort -n | sed -n "$(( (runs + 1) / 2 ))p")
  spread="$(printf '%s\n' $figures | sort -n | sed -n '1p')-$(printf '%s\n' $figures | sort -n | sed -n '$p')"
  limit=$(( budget * 103 / 100 ))
  if [ "$figure" -gt "$limit" ]; then
    fail=1
    echo "FAIL $probe $lua: $figure $what (median of $runs, $spread), budget $budget (+3% = $limit)"
    echo "     profile it: $profile"
  else
    echo "ok   $probe $lua: $figure $what (median of $runs, $spread), budget $budget"
  fi
done <bench/budgets.txt
exit $fail
