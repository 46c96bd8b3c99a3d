#!/usr/bin/env bash
# Builds byteps and runs the whole CTest suite under a sanitizer, with the presets of
# CMakePresets.json:
#   scripts/sanitize.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer, compiled by clang
#                              (installed first if missing), into build-asan/
#   scripts/sanitize.sh tsan   ThreadSanitizer, into build-tsan/
# Extra arguments go to ctest, e.g. scripts/sanitize.sh tsan -R cluster
# BUILD_JOBS sets the build's parallelism and TEST_JOBS the suite's (default for both: every
# core, as scripts/test.sh runs the plain suite). SANITIZE_STEPS=build or SANITIZE_STEPS=test
# does only that half (.ci/run builds the ASan tree while the fuzzers run).
#
# Every test runs under asan, including the real-process tests (byteps-launch starts sanitized
# byteps-server and worker binaries; a report makes a process exit non-zero, so the launcher
# fails) and the install test (the consumer is compiled with the same CMAKE_CXX_FLAGS, so it is
# sanitized too). The tsan preset leaves out the install, deploy and sandbox-fixture tests, which
# exercise no thread of the library (docs/status.md says why). halt_on_error is set by the test
# presets: the first report fails the test. ThreadSanitizer reads scripts/tsan-suppressions.txt:
# two patterns, each the destruction of an exception object whose count libstdc++ keeps where
# TSan cannot see it; nothing of byteps is suppressed (the test "tsan: a payload changed while
# a caller's thread writes it is reported" shows a race in the send path still is). AddressSanitizer
# uses no suppression. One ASan option is not about findings: byteps-launch runs each
# process under `stdbuf -oL`, which works by LD_PRELOADing libstdbuf.so, and ASan refuses to
# start when any library comes before its runtime ("ASan runtime does not come first in initial
# library list"); verify_asan_link_order=0 lets it start (libstdbuf only calls setvbuf and
# replaces no allocator function, so ASan still sees every allocation).
# The tsan preset defines ASIO_DISABLE_FENCED_BLOCK: Asio brackets each handler call with
# std::atomic_thread_fence, which ThreadSanitizer does not model (GCC warns: -Wtsan), while the
# handler itself is handed over under the io_context's mutex, which TSan does see. Without the
# fences TSan reasons about the same synchronisation and reports nothing falsely through them.
set -euo pipefail
cd "$(dirname "$0")/.."

preset=${1:-}
case "$preset" in
  asan | tsan) shift ;;
  *)
    echo "usage: $0 asan|tsan [ctest arguments...]" >&2
    exit 2
    ;;
esac

steps=${SANITIZE_STEPS:-all}
case "$steps" in
  all | build | test) ;;
  *)
    echo "$0: SANITIZE_STEPS must be all, build or test, not '$steps'" >&2
    exit 2
    ;;
esac
jobs=${BUILD_JOBS:-$(nproc)}
build_dir=build-$preset
start=$(date +%s)

if [[ $steps != test ]]; then
  if [[ $preset == asan ]]; then
    scripts/install-deps.sh --also clang  # the asan preset compiles with clang
  else
    scripts/install-deps.sh
  fi
  cmake --preset "$preset"
  cmake --build --preset "$preset" -j "$jobs"
fi
built=$(date +%s)
if [[ $steps == build ]]; then
  echo "sanitize.sh $preset: build $((built - start)) s"
  exit 0
fi
[[ -f $build_dir/CTestTestfile.cmake ]] || {
  echo "$0: $build_dir is not built: run with SANITIZE_STEPS=build (or all) first" >&2
  exit 2
}

# ThreadSanitizer maps its shadow memory at fixed addresses; with full address-space
# randomisation (vm.mmap_rnd_bits > 28, the default of recent kernels) every program dies with
# "FATAL: ThreadSanitizer: unexpected memory mapping". Running under `setarch -R` turns the
# randomisation off for the tests only.
runner=()
if [[ $preset == tsan ]] && command -v setarch >/dev/null; then
  runner=(setarch "$(uname -m)" -R)
fi

set +e
"${runner[@]}" ctest --preset "$preset" -j "${TEST_JOBS:-$(nproc)}" "$@" 2>&1 |
  tee "$build_dir/sanitize.log"
status=${PIPESTATUS[0]}
set -e
done_at=$(date +%s)
echo "sanitize.sh $preset: build $((built - start)) s, tests $((done_at - built)) s; log in $build_dir/sanitize.log"
exit "$status"
