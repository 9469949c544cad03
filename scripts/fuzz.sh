#!/bin/sh
# Builds the libFuzzer targets in fuzz/ and runs each for a bounded time, starting from the corpus
# kept in fuzz/corpus/<target>/ (new inputs go to a scratch directory; `merge` folds them back).
#
#   scripts/fuzz.sh [run] [target ...]   run each target FUZZ_SECONDS (default 30) seconds
#   scripts/fuzz.sh merge [target ...]   run, then merge what was found into fuzz/corpus/<target>
#   scripts/fuzz.sh seeds [target ...]   run each target once over every input of its corpus
#
# FUZZ_LUA picks the runtime the targets link: lua54 (the default, the system's) or lua55 (Lua 5.5
# built in from lua-src's sources; `make test` runs the seeds against it).
#
# Stable Rust only: coverage comes from `-Cpasses=sancov-module` and `-Cllvm-args=-sanitizer-...`
# (stable codegen options) with libFuzzer from the libfuzzer-sys crate, so neither cargo-fuzz nor a
# nightly toolchain is needed. AddressSanitizer needs `-Zsanitizer=address`, which stable rustc
# accepts only with RUSTC_BOOTSTRAP=1: FUZZ_SANITIZER=address (the default) sets it, =none builds
# without (about 15x more executions per second, no memory checks). A crash leaves its input in
# fuzz/artifacts/<target>/ and fails the script.
set -eu
cd "$(dirname "$0")/../fuzz"
mode=run
case "${1:-}" in run|merge|seeds) mode=$1; shift ;; esac
targets=${*:-"decode chunk"}
seconds=${FUZZ_SECONDS:-30}
sanitizer=${FUZZ_SANITIZER:-address}
triple=x86_64-unknown-linux-gnu
flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
flags="$flags -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table"
flags="$flags -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
if [ "$sanitizer" = address ]; then
  export RUSTC_BOOTSTRAP=1
  flags="-Zsanitizer=address $flags"
fi
lua=${FUZZ_LUA:-lua54}
case "$lua" in
  lua54|lua55) ;;
  *) echo "vmpool: FUZZ_LUA must be lua54 or lua55 (got '$lua')" >&2; exit 1 ;;
esac
# one target directory for both: libFuzzer and the other dependencies build once (the targets
# themselves are relinked when the runtime changes)
out="target/$sanitizer"
echo "== fuzz: building ($sanitizer, $lua)"
# --target keeps the flags off build scripts and proc macros
RUSTFLAGS="$flags" cargo build --quiet --release --locked --no-default-features --features "$lua" \
  --target $triple --target-dir "$out"
if [ "$mode" = seeds ]; then
  for t in $targets; do
    echo "== fuzz: $t over its $(ls "corpus/$t" | wc -l) seeds ($lua)"
    log=$(mktemp)
    "$out/$triple/release/$t" -runs=0 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="artifacts/$t/" \
      "corpus/$t" >"$log" 2>&1 || {
      tail -50 "$log" >&2
      echo "vmpool: fuzz target $t failed on a seed ($lua); the input is in fuzz/artifacts/$t/" >&2
      exit 1
    }
    grep -E "^Done|INITED" "$log" | tail -n 1
    rm -f "$log"
  done
  exit 0
fi
for t in $targets; do
  scratch=$(mktemp -d)
  mkdir -p "corpus/$t" "artifacts/$t"
  echo "== fuzz: $t for ${seconds}s"
  "$out/$triple/release/$t" "$scratch" "corpus/$t" -max_total_time="$seconds" -max_len=8192 \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$scratch.log" 2>&1 || {
    tail -50 "$scratch.log" >&2
    echo "vmpool: fuzz target $t failed; the input is in fuzz/artifacts/$t/" >&2
    exit 1
  }
  grep -E "^Done|stat::number_of_executed_units|stat::peak_rss_mb" "$scratch.log" | tr '\n' ' '
  echo
  if [ "$mode" = merge ]; then
    "$out/$triple/release/$t" -merge=1 "corpus/$t" "$scratch" >/dev/null 2>&1
    echo "   corpus/$t: $(ls "corpus/$t" | wc -l) inputs"
  fi
  rm -rf "$scratch" "$scratch.log"
done
