#!/bin/bash
# Runs a command and samples its CPU use and resident memory from /proc every 0.1 s (bash builtins
# only, so sampling costs next to nothing). Writes a Lua table to OUT:
#   peak_cpu_pct  highest CPU use over any 0.2 s window (all threads, % of one CPU); -1 when the
#                 process lived less than one window
#   peak_rss_kb   highest VmRSS seen
#   samples       how many samples were taken
# The command must exec into the measured process (nice, taskset and lua all do), so that its pid
# is the one sampled. Exits with the command's status; its stdout and stderr pass through.
# Usage: bench/report/sample.sh OUT command [args...]
set -u
out=$1
shift
"$@" &
pid=$!
clk=$(getconf CLK_TCK)
page_kb=$(( $(getconf PAGESIZE) / 1024 ))
# sleep without forking: a read with a timeout on a FIFO nobody writes to
fifo=$(mktemp -u "${TMPDIR:-/tmp}/vmpool-sample.XXXXXX")
mkfifo "$fifo"
exec 3<>"$fifo"
rm -f "$fifo"
window=2 # sample intervals per CPU window (0.2 s)
declare -a ticks_hist=() time_hist=()
peak_cpu=-1
peak_rss=0
n=0
while :; do
  line=""
  { read -r line </proc/$pid/stat; } 2>/dev/null || break
  now=${EPOCHREALTIME/./}
  rest=${line##*) }
  # shellcheck disable=SC2086
  set -- $rest
  [ "$1" = Z ] && break
  ticks=$(( ${12} + ${13} ))
  rss=$(( ${22} * page_kb ))
  (( rss > peak_rss )) && peak_rss=$rss
  ticks_hist[n]=$ticks
  time_hist[n]=$now
  if (( n >= window )); then
    dt=$(( now - time_hist[n - window] ))
    if (( dt > 0 )); then
      cpu=$(( (ticks - ticks_hist[n - window]) * 100 * 1000000 / clk / dt ))
      (( cpu > peak_cpu )) && peak_cpu=$cpu
    fi
  fi
  n=$(( n + 1 ))
  read -r -t 0.1 -u 3 _ || true
done
wait "$pid"
rc=$?
printf 'return { peak_cpu_pct = %d, peak_rss_kb = %d, samples = %d }\n' "$peak_cpu" "$peak_rss" "$n" >"$out"
exit $rc
