#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz/ and runs each for a bounded time
# (default 30 s each) over a copy of its seed corpus (fuzz/corpus/<target>/; the copy lets
# libFuzzer add what it finds without touching the repository). Fails on any crash, leak,
# sanitizer report or timeout; the input that caused it is kept as
# build-fuzz/artifacts/<target>-crash-... and printed as a reproduction command.
#   scripts/fuzz.sh [SECONDS]
# BUILD_JOBS sets the build's parallelism (default: every core).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS per target]" >&2; exit 2; }

# libFuzzer comes with Debian's clang (its runtime is in libclang-rt-dev).
scripts/install-deps.sh --also clang

build_dir=build-fuzz
jobs=${BUILD_JOBS:-$(nproc)}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DBYTEPS_BUILD_FUZZERS=ON -DBYTEPS_BUILD_TESTS=OFF -DBYTEPS_BUILD_EXAMPLES=OFF \
  -DBYTEPS_BUILD_TOOLS=OFF -DBYTEPS_BUILD_COMPILED=OFF
cmake --build "$build_dir" -j "$jobs"

# The committed corpus must still pass as it is (a quick regression check) ...
ctest --test-dir "$build_dir/fuzz" --output-on-failure --no-tests=error

# ... then each target is fuzzed for $seconds seconds.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
status=0
for target in fuzz_frame fuzz_rendezvous fuzz_server_session; do
  work=$build_dir/corpus-run/$target
  rm -rf "$work"
  mkdir -p "$work" "$build_dir/artifacts"
  cp fuzz/corpus/"$target"/* "$work"/
  echo "fuzz: $target for ${seconds} s"
  if ! "$build_dir/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=4096 -print_final_stats=1 -artifact_prefix="$build_dir/artifacts/$target-" \
      "$work" 2>"$build_dir/$target.log"; then
    tail -n 60 "$build_dir/$target.log"
    echo "fuzz: $target FAILED; reproduce with: $build_dir/fuzz/$target $build_dir/artifacts/$target-*" >&2
    status=1
  else
    grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|Done)' "$build_dir/$target.log" | tail -n 2
  fi
done
((status == 0)) && echo "fuzz: every target ran ${seconds} s without a finding"
exit "$status"
