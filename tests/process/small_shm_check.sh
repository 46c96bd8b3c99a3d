#!/usr/bin/env bash
# A job on a machine whose /dev/shm is smaller than one ipc ring (a container's default is
# 64 MiB; here 8 MiB, in a mount namespace of this test's own): the rings cannot be made, and
# the job must go by TCP with exact sums, as it does with BYTEPS_ENABLE_IPC=0, never die of
# SIGBUS at the first write past the limit (as it did before shm_segment took its pages with
# posix_fallocate).
#   small_shm_check.sh BYTEPS_LAUNCH PUSH_PULL_CHECK [ARGS...]
# Needs root (a mount namespace and a tmpfs mount) and unshare; without them it exits 77 (a
# skip to CTest, which CI, as root, does not allow) and says what is missing.
set -euo pipefail
launch=$1 check=$2
shift 2
# shellcheck source=private_shm.sh
source "$(dirname "$0")/private_shm.sh"
if ! can_have_private_shm; then
  echo "SKIPPED: needs root and unshare to mount a small /dev/shm in a mount namespace" >&2
  exit 77
fi
run_with_shm() {  # SIZE CHECK_ARGS...: the job, with a /dev/shm of SIZE
  local size=$1
  shift
  with_private_shm "$size" "$launch" --workers 2 --servers 1 --timeout 240 -- "$check" "$@"
}
echo "== /dev/shm of 8 MiB, rings of 16 MiB: the rings cannot be made"
BYTEPS_IPC_RING_BYTES=16777216 run_with_shm 8m "$@" || {
  echo "FAILED: the job failed with a /dev/shm smaller than a ring (exit $?)" >&2
  exit 1
}
