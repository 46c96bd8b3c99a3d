#!/usr/bin/env bash
# Sourced by process tests that need a /dev/shm of their own (a tmpfs in a mount namespace of
# the test's own, gone with it): one smaller than the machine's, or one that no job of another
# test running beside it can sweep.
#   can_have_private_shm          true as root with unshare
#   with_private_shm SIZE CMD...  runs CMD with a private /dev/shm of SIZE (tmpfs units, e.g.
#                                 8m; empty: tmpfs's default), exit 90 when the mount fails

can_have_private_shm() { ((EUID == 0)) && command -v unshare >/dev/null; }

with_private_shm() {
  local size=$1
  shift
  unshare --mount --propagation private bash -c '
    size=$1
    shift
    mount -t tmpfs ${size:+-o size="$size"} tmpfs /dev/shm ||
      { echo "mounting a private /dev/shm failed" >&2; exit 90; }
    exec "$@"' _ "$size" "$@"
}
