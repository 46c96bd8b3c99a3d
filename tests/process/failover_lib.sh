# Sourced by the failover job scripts (failover_main_job.sh, failover_recsys.sh): a work folder
# removed at exit (with the background launcher, if one still runs, and its whole cluster),
# `fail` that prints each log's last lines, and `digest_of LOG`, the "final parameters: digest"
# a trainer printed.
work=$(mktemp -d)
launcher=
cleanup() {
  if [[ -n $launcher ]] && kill -0 "$launcher" 2>/dev/null; then
    kill -TERM "$launcher" 2>/dev/null  # the launcher stops its whole cluster
    wait "$launcher" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  for log in "$work"/*.log; do
    echo "---- last lines of $(basename "$log")"
    tail -25 "$log"
  done
  exit 1
}

digest_of() { grep -o "final parameters: digest [0-9a-f]*" "$1" | awk '{print $4}'; }
