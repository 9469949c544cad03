#!/bin/sh
# Builds the libFuzzer targets in fuzz/ and runs each for a bounded time, starting from the corpus
# kept in fuzz/corpus/<target>/ (new inputs go to a scratch directory; `merge` folds them back).
#
#   scripts/fuzz.sh [run] [target ...]   run each target FUZZ_SECONDS (default 30) seconds
#   scripts/fuzz.sh merge [target ...]   run, then merge what was found into fuzz/corpus/<target>
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
case "${1:-}" in run|merge) mode=$1; shift ;; esac
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
echo "== fuzz: building ($sanitizer)"
# --target keeps the flags off build scripts and proc macros
RUSTFLAGS="$flags" cargo build --quiet --release --locked --target $triple --target-dir "target/$sanitizer"
for t in $targets; do
  scratch=$(mktemp -d)
  mkdir -p "corpus/$t" "artifacts/$t"
  echo "== fuzz: $t for ${seconds}s"
  "target/$sanitizer/$triple/release/$t" "$scratch" "corpus/$t" -max_total_time="$seconds" -max_len=8192 \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$scratch.log" 2>&1 || {
    tail -50 "$scratch.log" >&2
    echo "vmpool: fuzz target $t failed; the input is in fuzz/artifacts/$t/" >&2
    exit 1
  }
  grep -E "^Done|stat::number_of_executed_units|stat::peak_rss_mb" "$scratch.log" | tr '\n' ' '
  echo
  if [ "$mode" = merge ]; then
    "target/$sanitizer/$triple/release/$t" -merge=1 "corpus/$t" "$scratch" >/dev/null 2>&1
    echo "   corpus/$t: $(ls "corpus/$t" | wc -l) inputs"
  fi
  rm -rf "$scratch" "$scratch.log"
done
