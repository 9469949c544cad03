#!/bin/sh
# The one entry point of the benchmarks: installs what they need, builds the module trees, runs the
# suites and writes the report. Usage:
#   bench/run.sh report      everything, then bench/REPORT.md and bench/charts/*.svg (make report)
#   bench/run.sh micro       the micro benchmark only, summary on stdout (make bench)
#   bench/run.sh workload    the strategies x parallelism x CPUs matrix only
#   bench/run.sh callgrind   instructions per call and profiles only (bench/callgrind)
#   bench/run.sh heavy       heavy work only: speedup.lua, map.lua (Lua 5.4), ngx/heavy.lua (LuaJIT)
#   bench/run.sh compare A B two revisions interleaved (bench/compare)
#   bench/run.sh render      rewrite REPORT.md from the results already in bench/out/
# Settings are environment variables, listed in bench/README.md (BENCH_QUICK=1 for a quick run).
set -eu
cd "$(dirname "$0")/.."
what=${1:-report}
runtimes=${BENCH_RUNTIMES:-"lua5.1 lua5.4 lua5.5 luajit"}
# Lua 5.5 is the one scripts/lua55.sh builds (bench/report/build.sh, through scripts/rock.sh)
PATH="$PWD/target/lua5.5/bin:$PATH"
export PATH
case "$what" in
  render)
    exec lua5.4 bench/report/write.lua
    ;;
  compare)
    scripts/install-deps.sh valgrind
    exec lua5.4 bench/report/run.lua "$@"
    ;;
  heavy)
    # only the rocks: the heavy-work scripts use neither the count-alloc trees nor the ping-pong
    scripts/install-deps.sh valgrind util-linux
    scripts/rock.sh lua5.4
    scripts/rock.sh luajit
    exec lua5.4 bench/report/run.lua heavy
    ;;
  micro|workload|callgrind|report) ;;
  *) echo "usage: bench/run.sh report|micro|workload|callgrind|heavy|compare A B|render" >&2; exit 2 ;;
esac
scripts/install-deps.sh valgrind util-linux
need="$runtimes ${BENCH_WORKLOAD_LUA:-lua5.4}"
# shellcheck disable=SC2086
bench/report/build.sh $(printf '%s\n' $need | sort -u)
# the heavy-work suite of the report runs speedup.lua and map.lua on Lua 5.4 and ngx/heavy.lua on
# LuaJIT, whichever runtimes the other suites measure
if [ "$what" = report ]; then
  case " $need " in *" lua5.4 "*) ;; *) scripts/rock.sh lua5.4 ;; esac
  case " $need " in *" luajit "*) ;; *) scripts/rock.sh luajit ;; esac
fi
lua5.4 bench/report/run.lua "$what"
case "$what" in
  report) lua5.4 bench/report/write.lua ;;
  micro) lua5.4 bench/report/write.lua --section=micro ;;
esac
