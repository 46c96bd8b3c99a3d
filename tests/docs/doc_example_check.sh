#!/usr/bin/env bash
# Runs architecture.md's example (a transport that counts the payload bytes it sends) as the doc
# runs it, and checks that each worker printed what the doc says: the sum of 2 workers' ones,
# and the 12 MB tensor plus under a kilobyte of hellos, proofs and the tensor's name.
#   doc_example_check.sh BYTEPS_LAUNCH EXAMPLE
set -euo pipefail
launch=$1 example=$2
out=$("$launch" --workers 2 --servers 2 --timeout 240 -- "$example" 2>&1) || {
  echo "$out"
  echo "FAILED: the example's job did not finish" >&2
  exit 1
}
echo "$out"
status=0
for rank in 0 1; do
  line=$(grep -oE "rank $rank: grad\[0\] = [^,]*, [0-9]+ payload bytes sent" <<<"$out" || true)
  bytes=$(grep -oE '[0-9]+ payload' <<<"$line" | grep -oE '[0-9]+' || true)
  if [[ $line != "rank $rank: grad[0] = 2, "* ]] || ((bytes < 12000000 || bytes >= 12001024)); then
    echo "FAILED: worker $rank printed \"${line:-nothing}\"; docs/architecture.md says" \
         "grad[0] = 2 and 12 MB plus under a kilobyte of payload bytes" >&2
    status=1
  fi
done
exit $status
