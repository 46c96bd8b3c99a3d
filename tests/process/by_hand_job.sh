# Sourced by the tests that start a job's processes by hand (hostile_job.sh, flood_job.sh):
# a work folder `dir`, the started processes' `pids` (each killed on exit, with the folder
# removed), `free_port`, a loopback port nobody listens on, and `expect_exit_0`.
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# expect_exit_0 NAME...: waits for each process NAME (its pid in ${NAME}_pid) and prints PASS or
# FAIL with its exit status; each failure adds one to the caller's `failures`.
expect_exit_0() {
  local name pid_var rc
  for name in "$@"; do
    pid_var="${name}_pid"
    wait "${!pid_var}"
    rc=$?
    if ((rc != 0)); then
      echo "FAIL $name exited $rc"
      failures=$((failures + 1))
    else
      echo "PASS $name exited 0"
    fi
  done
}
