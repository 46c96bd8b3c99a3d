#!/usr/bin/env bash
# The main job with the timeline on (steps 1 and 2): every node writes its file, byteps-trace
# merges them, every flow pairs, and the summary counts what the files hold. Then the tool's
# errors: each names the problem and exits with its documented status.
# Usage: trace_main_job.sh BYTEPS_LAUNCH TRAIN_MLP BYTEPS_TRACE [train_mlp arguments...]
set -euo pipefail
launch=$1 trainer=$2 tool=$3
shift 3
dir=$(mktemp -d "${TMPDIR:-/tmp}/bps-trace-XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "trace_main_job: FAIL: $*" >&2; exit 1; }

# Steps 1 and 2 hold no epoch's end: the job push_pulls its loss after an epoch's last step,
# and its shortest epoch (under the sanitizers: 4096 samples at batch 1024) has 4 steps, 0-3.
BYTEPS_TRACE_ON=1 BYTEPS_TRACE_START_STEP=1 BYTEPS_TRACE_END_STEP=3 BYTEPS_TRACE_DIR="$dir/trace" \
  BYTEPS_LOG_LEVEL=WARNING "$launch" --workers 2 --servers 2 --timeout 240 -- "$trainer" "$@"

files=$(cd "$dir/trace" && ls | tr '\n' ' ')
[[ $files == "server-0.json server-1.json worker-0.json worker-1.json " ]] ||
  fail "expected one file per node in BYTEPS_TRACE_DIR, found: $files"

"$tool" merge "$dir/trace" -o "$dir/job.json"
summary=$("$tool" summary "$dir/job.json")
echo "$summary"
first=$(head -n 1 <<<"$summary")
re='^4 nodes, ([0-9]+) spans \(([0-9]+) tensor operations\), ([0-9]+) flows started, ([0-9]+) finished, ([0-9]+) paired$'
[[ $first =~ $re ]] || fail "unexpected first line of the summary: $first"
tensors=${BASH_REMATCH[2]} started=${BASH_REMATCH[3]} finished=${BASH_REMATCH[4]} paired=${BASH_REMATCH[5]}
((started > 0 && started == finished && finished == paired)) ||
  fail "flows do not pair: $started started, $finished finished, $paired paired"
# 2 workers x 2 steps x the model's tensors: a multiple of 4, and the same from the folder.
((tensors > 0 && tensors % 4 == 0)) || fail "$tensors tensor operations is not 2 workers x 2 steps x tensors"
[[ $("$tool" summary "$dir/trace" | head -n 1) == "$first" ]] ||
  fail "summary of the folder differs from summary of the merged file"

# The picture: a PNG when gnuplot is there, else an error that says what to install.
if command -v gnuplot >/dev/null; then
  "$tool" plot "$dir/job.json" -o "$dir/job.png"
  [[ $(head -c 8 "$dir/job.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
    fail "byteps-trace plot did not write a PNG"
  [[ ! -e $dir/job.png.dat && ! -e $dir/job.png.gp ]] || fail "plot left its gnuplot files behind"
fi

expect_status() {  # expect_status STATUS TEXT COMMAND...
  local want=$1 text=$2 status=0 err
  shift 2
  err=$("$@" 2>&1 >/dev/null) || status=$?
  ((status == want)) || fail "$* exited $status, expected $want ($err)"
  [[ $err == *"$text"* ]] || fail "$* said '$err', expected it to contain '$text'"
}
"$tool" --help | grep -q "byteps-trace merge DIR" || fail "--help does not show merge"
expect_status 2 "unknown command 'mergee'" "$tool" mergee "$dir/trace"
expect_status 2 "plot needs a folder of timeline files or a merged file, and -o PNG" "$tool" plot "$dir/trace"
expect_status 2 "--top 'x' is not a whole number" "$tool" summary "$dir/trace" --top x
expect_status 1 "is not a folder" "$tool" merge "$dir/none"
mkdir "$dir/empty"
expect_status 1 "holds no worker-<rank>.json or server-<rank>.json" "$tool" merge "$dir/empty"
echo '{"traceEvents": [' >"$dir/empty/worker-0.json"
expect_status 1 "not valid JSON at line" "$tool" merge "$dir/empty"
echo "trace_main_job: OK ($tensors tensor operations, $paired flows paired)"
