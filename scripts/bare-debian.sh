#!/usr/bin/env bash
# Checks the README's promise on a bare Debian 12: makes a minbase Debian 12 (bookworm) root with
# mmdebstrap from this machine's Debian mirror, copies the repository's HEAD into it (as a clean
# clone sees it: `git archive`, nothing untracked), and runs in it, as root, exactly the README's
# two commands, scripts/main-job.sh then scripts/test.sh. It fails when either fails, when a test
# skipped that tests/skips-allowed.txt does not allow (scripts/check-skips.cmake, as .ci/run
# does), or when the suite left something behind (scripts/check-leftovers.sh). Whatever a bare
# root lacks that the two commands do not install shows up here: scripts/install-deps.sh is the
# place to add it. Times of each step: docs/deploy.md, "A bare Debian 12".
#
# The root runs in mount and PID namespaces of its own (unshare, then pivot_root into it):
# /proc, /sys, /dev (with a fresh /dev/pts instance and a tmpfs /dev/shm, so the suite's shared
# memory is its own) are mounted there only, so the machine never sees them, and they and every
# process started in the root end with the namespaces, also after a SIGKILL. The network is the machine's: apt-get needs the mirror and npm ci the npm registry
# (the root gets this machine's resolv.conf and the certificate authorities it adds to Debian's,
# /usr/local/share/ca-certificates), and the Slurm test makes its own network namespaces and
# veths inside the root.
#
# Usage: scripts/bare-debian.sh [OPTIONS]   (as root; Debian 12 host)
#   --root DIR          make the root in DIR (must not exist, or be empty); default: a new
#                       /var/tmp/byteps-bare.XXXXXX
#   --keep              keep the root afterwards (unmounted) for inspection; rm -rf it yourself
#   --tests-only        run scripts/test.sh only (no main job)
#   --ctest-args ARGS   extra arguments for scripts/test.sh, i.e. ctest (one string, split on
#                       spaces), e.g. --ctest-args '-R unit:' for a quick smoke run. With them
#                       the skip check still runs, over the tests that ran
#   --lock FILE         hold FILE (flock) while the two commands run (packages, build, suite),
#                       for a machine shared with other builds
#   --with-cuda         bind this machine's CUDA toolkit (/usr/local/cuda, with NCCL; no Debian
#                       package) read-only at the same place in the root, with nvcc on the
#                       PATH, CUDA_HOME and the machine's LIBRARY_PATH, so the CUDA programs
#                       and their tests build there as on the machine
#   --prepare-only      make the root, copy HEAD and run scripts/install-deps.sh in it, then
#                       stop and keep it (for --reuse)
#   --reuse             the root (--root DIR) was made by --prepare-only: skip mmdebstrap and
#                       the copy; it is removed at the end unless --keep
#   --build-only        with --reuse: run scripts/build.sh in the root and stop, keeping it
#                       (.ci/run builds there beside another stage, at idle priority)
#   --mirror LINE       an apt sources.list line for the root (repeatable); default: this
#                       machine's Debian bookworm entries (/etc/apt/sources.list*)
#   --dockerfile        also build deploy/Dockerfile with buildah (chroot isolation, vfs
#                       storage), on a debian:12 base imported from a second mmdebstrap root,
#                       since no registry is reachable here; the image is removed afterwards
#   --dockerfile-only   only that: no root, no two commands
#   -h, --help          this text
set -euo pipefail

usage() { sed -n '/^# Usage:/,/^#   -h, --help/{s/^# \{0,1\}//;p}' "$0"; }
die() {
  echo "bare-debian: $*" >&2
  exit 1
}
say() { echo "bare-debian: $*"; }

repo=$(cd "$(dirname "$0")/.." && pwd)
root='' keep=0 commands=1 tests_only=0 ctest_args='' lock='' dockerfile=0
with_cuda=0 prepare_only=0 reuse=0 build_only=0
mirrors=()
while (($# > 0)); do
  case $1 in
    --root) root=${2:?--root needs a folder}; shift 2 ;;
    --keep) keep=1; shift ;;
    --tests-only) tests_only=1; shift ;;
    --ctest-args) ctest_args=${2?--ctest-args needs a string}; shift 2 ;;
    --lock) lock=${2:?--lock needs a file}; shift 2 ;;
    --mirror) mirrors+=("${2:?--mirror needs a sources.list line}"); shift 2 ;;
    --with-cuda) with_cuda=1; shift ;;
    --prepare-only) prepare_only=1 keep=1; shift ;;
    --reuse) reuse=1; shift ;;
    --build-only) build_only=1 keep=1; shift ;;
    --dockerfile) dockerfile=1; shift ;;
    --dockerfile-only) dockerfile=1 commands=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bare-debian: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

((prepare_only && reuse)) && die "--prepare-only makes a root, --reuse takes one made before: give one of them"
((build_only && !reuse)) && die "--build-only builds in a root made before: give --reuse --root DIR"
((reuse)) && [[ -z $root ]] && die "--reuse needs --root DIR (the root --prepare-only made)"
((reuse && dockerfile)) && die "--dockerfile makes roots of its own: leave out --reuse"
cuda_dir=''
if ((with_cuda)); then
  cuda_dir=$(readlink -f /usr/local/cuda 2>/dev/null || true)
  if [[ -z $cuda_dir || ! -x $cuda_dir/bin/nvcc ]]; then
    die "--with-cuda: no CUDA toolkit at /usr/local/cuda (no bin/nvcc there)"
  fi
fi
((EUID == 0)) || die "needs root (mmdebstrap, chroot, mounts); try: sudo $0"
command -v git >/dev/null || die "needs git, to copy the repository's HEAD"
git -C "$repo" rev-parse --verify -q HEAD >/dev/null || die "$repo is not a git checkout with a commit"
if ! git -C "$repo" diff --quiet HEAD -- 2>/dev/null; then
  say "note: the checkout has changes that are not committed; the root gets HEAD only"
fi

# Every step's time, printed at the end (and on failure).
t_start=$(date +%s)
steps=()
step_name='' step_t0=0
begin() {
  step_name=$1 step_t0=$(date +%s)
  echo
  echo "==== bare-debian: $step_name ($(date -u +%H:%M:%S) UTC)"
}
end() {
  steps+=("$(printf '%-52s %5d s' "$step_name" $(($(date +%s) - step_t0)))")
  step_name=''
}
print_steps() {
  ((${#steps[@]} > 0)) || return 0
  echo "==== bare-debian: step times (total $(($(date +%s) - t_start)) s)"
  printf '  %s\n' "${steps[@]}"
  if [[ -n $step_name ]]; then
    printf '  %-52s %5d s  (did not finish)\n' "$step_name" $(($(date +%s) - step_t0))
  fi
}

# --- Clean-up: runs on every exit, also after a failure or Ctrl-C. -----------------------------
created=()     # folders this script made (removed unless --keep)
running=''     # the pid of a step waited for in the background
containers_made=''  # set when /var/lib/containers did not exist before buildah ran
unshare_pid=/var/tmp/byteps-bare.$$.unshare-pid  # in_root's unshare, to end its namespaces
# The processes whose root is inside DIR (a daemon a package or a test started and left).
processes_rooted_in() {
  local dir=$1 p r
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null) || continue
    [[ $r == "$dir" || $r == "$dir"/* ]] && echo "${p#/proc/}"
  done
}
cleanup() {
  local status=$? dir pids mounts
  trap - EXIT INT TERM HUP
  set +e
  # A step still running (a signal came): unshare's SIGKILL ends the namespaces (--kill-child).
  if [[ -n $running ]]; then
    [[ -s $unshare_pid ]] && kill -KILL "$(cat "$unshare_pid")" 2>/dev/null
    kill -TERM "$running" 2>/dev/null
    wait "$running" 2>/dev/null
  fi
  rm -f "$unshare_pid"
  # buildah keeps a blob cache in /var/lib/containers whatever --root says.
  [[ -n $containers_made ]] && rm -rf /var/lib/containers
  print_steps
  for dir in "${created[@]}"; do
    [[ -d $dir ]] || continue
    pids=$(processes_rooted_in "$dir")
    if [[ -n $pids ]]; then
      say "stopping processes left in $dir: ${pids//$'\n'/ }"
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null
      sleep 2
      pids=$(processes_rooted_in "$dir")
      # shellcheck disable=SC2086
      [[ -n $pids ]] && kill -KILL $pids 2>/dev/null && sleep 1
    fi
    # The mounts live in the namespace that ended with its processes; this is a safety net for
    # the machine's own namespace (e.g. mmdebstrap interrupted half-way).
    mounts=$(findmnt -rn -o TARGET | awk -v d="$dir" 'index($0, d "/") == 1' | sort -r)
    if [[ -n $mounts ]]; then
      say "unmounting ${mounts//$'\n'/ }"
      while read -r m; do umount -R "$m" 2>/dev/null || umount -l "$m"; done <<<"$mounts"
    fi
    if findmnt -rn -o TARGET | awk -v d="$dir" 'index($0, d "/") == 1' | grep -q .; then
      say "something is still mounted under $dir: not removing it"
      status=1
    elif ((keep)); then
      say "kept $dir (unmounted); remove it with: rm -rf --one-file-system $dir"
    else
      say "removing $dir"
      rm -rf --one-file-system "$dir"
    fi
  done
  if ((status == 0)); then
    if ((prepare_only)); then
      say "OK: a bare Debian 12 root with the packages is ready: $root (for --reuse)"
    elif ((build_only)); then
      say "OK: built in the root $root (for --reuse)"
    elif ((commands)); then
      say "OK: a bare Debian 12 ran the README's two commands; every skip allowed; nothing left behind"
    fi
    ((dockerfile)) && say "OK: buildah built deploy/Dockerfile"
  else
    say "FAILED (exit $status)"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'echo; say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM HUP

# --- mmdebstrap, from Debian's packages ----------------------------------------------------------
if ! command -v mmdebstrap >/dev/null; then
  say "installing mmdebstrap (Debian's package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi
if ((dockerfile)) && ! command -v buildah >/dev/null; then
  say "installing buildah (Debian's package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah >/dev/null
fi

# This machine's Debian bookworm entries, as one-line sources.list entries (deb822 or one-line).
host_mirrors() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] && grep -E '^\s*deb\s' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && uris != "" && suites != "")
          print "deb " uris " " suites " " (comps == "" ? "main" : comps)
        types = uris = suites = comps = ""
      }
      /^[ \t]*$/ { flush(); next }
      /^[ \t]*#/ { next }
      tolower($1) == "types:" { $1 = ""; types = substr($0, 2) }
      tolower($1) == "uris:" { $1 = ""; uris = substr($0, 2) }
      tolower($1) == "suites:" { $1 = ""; suites = substr($0, 2) }
      tolower($1) == "components:" { $1 = ""; comps = substr($0, 2) }
      END { flush() }' "$f"
  done
}
if ((${#mirrors[@]} == 0)); then
  # Keep Debian's own bookworm suites; one line per suite (a deb822 stanza may list several).
  while read -r _ uri suites_and_comps; do
    read -ra words <<<"$suites_and_comps"
    comps=() suites=()
    for w in "${words[@]}"; do
      if [[ $w == bookworm* ]]; then suites+=("$w"); else comps+=("$w"); fi
    done
    for s in "${suites[@]}"; do mirrors+=("deb $uri $s ${comps[*]:-main}"); done
  done < <(host_mirrors | grep -E '^deb\s+(\[[^]]*\]\s+)?\S*debian\S*\s+bookworm' | sed -E 's/\[[^]]*\]\s+//')
  ((${#mirrors[@]} > 0)) ||
    die "no Debian bookworm entry in /etc/apt/sources.list*: give one with --mirror 'deb URI bookworm main'"
fi

mkroot() {  # mkroot DIR: DIR is made empty (or checked empty) and recorded for the clean-up
  local dir=$1
  if [[ -e $dir ]]; then
    [[ -d $dir && -z $(ls -A "$dir") ]] || die "$dir exists and is not an empty folder"
  else
    mkdir -p "$dir"
  fi
  created+=("$(cd "$dir" && pwd -P)")
}
if ((reuse)); then
  [[ -d $root/root/byteps && -x $root/bin/bash ]] ||
    die "--reuse: $root is not a root made by --prepare-only (no /root/byteps in it)"
  root=$(cd "$root" && pwd -P)
  created+=("$root")
elif [[ -z $root ]]; then
  root=$(mktemp -d /var/tmp/byteps-bare.XXXXXX)
  created+=("$root")
else
  mkroot "$root"
  root=$(cd "$root" && pwd -P)
fi
chmod 755 "$root"

# --- The two commands, in the root, in a mount namespace of their own --------------------------
# in_root SCRIPT (in a subshell: it execs unshare): runs the bash SCRIPT in the root (cwd /root/byteps), as root with a login's
# environment, in new mount and PID namespaces with the mounts a machine has. The root becomes
# the mount namespace's / (pivot_root, not chroot): a process that enters a mount namespace
# (nsenter --mount, as the Slurm test does for each node) gets that namespace's / as its root,
# which after a chroot would be this machine's. The first process of the PID namespace waits for
# the script; when it exits, the kernel ends whatever is left in the namespace (--kill-child:
# also when unshare itself is killed).
in_root() {
  echo "$BASHPID" >"$unshare_pid"
  # shellcheck disable=SC2016 # expanded by the inner bash
  exec unshare --mount --propagation private --pid --fork --kill-child -- bash -euc '
    root=$1 script=$2 cuda=$3 library_path=$4
    # The root a mount of its own, as / is on a machine (pivot_root needs it; so does the
    # Slurm test: unshare --mount makes the new namespace'"'"'s / private, EINVAL on no mount).
    mount --rbind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --make-rslave "$root/sys"
    mount --rbind /dev "$root/dev"
    mount --make-rslave "$root/dev"
    mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
    mount --bind "$root/dev/pts/ptmx" "$root/dev/ptmx"
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
    if [[ -n $cuda ]]; then
      mkdir -p "$root/usr/local/cuda"
      mount --rbind "$cuda" "$root/usr/local/cuda"
      mount -o remount,bind,ro "$root/usr/local/cuda"
    fi
    cd "$root"
    pivot_root . .
    umount -l .
    cd /
    path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    cuda_env=()
    # The toolkit as this machine'"'"'s environment has it: nvcc on the PATH (CMake'"'"'s CUDA
    # language looks there), CUDA_HOME, and LIBRARY_PATH when the machine sets one.
    if [[ -n $cuda ]]; then
      path=/usr/local/cuda/bin:$path
      cuda_env=(CUDA_HOME=/usr/local/cuda)
      [[ -n $library_path ]] && cuda_env+=(LIBRARY_PATH="$library_path")
    fi
    /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash \
      TERM="${TERM:-dumb}" LANG=C.UTF-8 PATH="$path" "${cuda_env[@]}" \
      /bin/bash -euo pipefail -c "cd /root/byteps; $script"
  ' in_root "$root" "$1" "$cuda_dir" "${LIBRARY_PATH:-}"
}

# Each line of output with the minutes and seconds since the step began.
stamp() {
  local t0 line now
  t0=$(date +%s)
  while IFS= read -r line || [[ -n $line ]]; do
    printf -v now '%(%s)T' -1
    printf '[%02d:%02d] %s\n' $(((now - t0) / 60)) $(((now - t0) % 60)) "$line"
  done
}

lock_cmd=()
[[ -z $lock ]] || lock_cmd=(flock "$lock")

# background COMMAND...: runs COMMAND and waits for it, such that a signal to this script stops
# the wait at once (bash runs a trap only after a foreground command ends).
background() {
  local status=0
  "$@" &
  running=$!
  wait "$running" || status=$?
  running=''
  return "$status"
}

if ((commands && !reuse)); then
  begin "mmdebstrap: a minbase Debian 12 root"
  say "root: $root"
  printf 'bare-debian: mirror: %s\n' "${mirrors[@]}"
  mmdebstrap --variant=minbase --mode=root --format=directory bookworm "$root" "${mirrors[@]}"
  # Daemons that packages' scripts would start (munge, slurm) are not started in the root, as in
  # Debian's container images: there is no init there to stop them again.
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  # This machine's network, as a fresh install on it would have it: its resolver, and the
  # certificate authorities it trusts beyond Debian's (a TLS-inspecting proxy's, say), which
  # ca-certificates (pulled in by install-deps.sh's packages) adds to the system's store. Without
  # them npm ci cannot reach the npm registry from behind such a proxy.
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
  # /etc/hosts belongs to no package: Debian's installer writes it (mmdebstrap does not), and the
  # Slurm test binds each node's own hosts file over it. The installer's, for this hostname:
  printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n' \
    "$(hostname)" >"$root/etc/hosts"
  local_cas=(/usr/local/share/ca-certificates/*.crt)
  if [[ -e ${local_cas[0]} ]]; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp -L "${local_cas[@]}" "$root/usr/local/share/ca-certificates/"
    say "this machine's local certificate authorities: ${local_cas[*]##*/}"
  fi
  say "the root has $(chroot "$root" dpkg-query -W -f='.\n' | wc -l) packages, $(du -sm "$root" | cut -f1) MB"
  end

  begin "copy the repository's HEAD ($(git -C "$repo" rev-parse --short HEAD)) to /root/byteps"
  mkdir -p "$root/root/byteps"
  git -C "$repo" archive --format=tar HEAD | tar -x -C "$root/root/byteps"
  say "$(git -C "$repo" ls-files | wc -l) tracked files"
  end
fi

if ((commands)); then
  ((reuse)) && say "root: $root (made before; HEAD of then: its /root/byteps)"
  ((with_cuda)) && say "the machine's CUDA toolkit $cuda_dir is at /usr/local/cuda in the root (read-only)"
  if [[ -n $lock ]]; then
    say "waiting for the lock $lock (held while the two commands run)"
    exec 9>>"$lock"
    background flock 9
    say "holding $lock"
  fi

  if ((prepare_only)); then
    begin "scripts/install-deps.sh (the packages, for the two commands later)"
    packages() { in_root 'scripts/install-deps.sh 2>&1' | stamp; }
    background packages
    end
  elif ((build_only)); then
    begin "scripts/build.sh (the whole build, for the two commands later)"
    build() { in_root 'scripts/install-deps.sh 2>&1 && scripts/build.sh 2>&1' | stamp; }
    background build
    end
  else
    if ((!tests_only)); then
      begin "scripts/main-job.sh (packages, build, the main job)"
      main_job() { in_root 'scripts/main-job.sh 2>&1' | stamp; }
      background main_job
      end
    fi

    begin "scripts/test.sh ${ctest_args}(build the rest, every test)"
    # The log is CTest's console output (scripts/check-skips.cmake reads its summary); the
    # snapshot is taken before the suite, as .ci/run does. check-leftovers needs nothing test.sh
    # installs. After the suite, its slowest tests with their share of their timeout.
    suite() {
      # shellcheck disable=SC2016
      in_root '
        mkdir -p build
        tmp=$(mktemp /root/leftovers.XXXXXX)
        scripts/check-leftovers.sh snapshot "$tmp"
        status=0
        scripts/test.sh '"$ctest_args"' 2>&1 | tee build/bare-debian-test.log || status=$?
        echo "==== bare-debian: scripts/test.sh exited $status"
        cmake -DLOG=build/bare-debian-test.log -DBUILD_DIR=build -DDEFAULT_TIMEOUT=600 \
          -P scripts/test-report.cmake 2>&1 || true
        echo "==== bare-debian: skips only where hardware is missing (scripts/check-skips.cmake)"
        cmake -DLOG=build/bare-debian-test.log -P scripts/check-skips.cmake 2>&1 || status=1
        echo "==== bare-debian: nothing left behind (scripts/check-leftovers.sh)"
        scripts/check-leftovers.sh check "$tmp" 2>&1 || status=1
        rm -f "$tmp"
        exit "$status"
      ' | stamp
    }
    background suite
    end
  fi
  if [[ -n $lock ]]; then
    flock -u 9
    exec 9>&-
  fi
fi

if ((dockerfile)); then
  # No registry is reachable from here: the Dockerfile's bases (debian:12, debian:12-slim) are
  # a minbase root made with the same mirror, imported under those names into a storage of
  # this run's own (vfs: no mounts), which goes with the clean-up.
  bwork=$root.buildah
  [[ -e /var/lib/containers ]] || containers_made=1
  mkroot "$bwork"
  buildah=(buildah --root "$bwork/storage" --runroot "$bwork/run" --storage-driver vfs)
  begin "buildah: debian:12 and debian:12-slim from an mmdebstrap tarball"
  mmdebstrap --variant=minbase --mode=root --format=tar bookworm "$bwork/base.tar" "${mirrors[@]}"
  ctr=$("${buildah[@]}" from scratch)
  "${buildah[@]}" add "$ctr" "$bwork/base.tar" / >/dev/null
  "${buildah[@]}" config --cmd /bin/bash "$ctr"
  "${buildah[@]}" commit -q "$ctr" localhost/bare-debian-base:12 >/dev/null
  "${buildah[@]}" rm "$ctr" >/dev/null
  "${buildah[@]}" tag localhost/bare-debian-base:12 docker.io/library/debian:12 \
    docker.io/library/debian:12-slim
  rm -f "$bwork/base.tar"
  end
  begin "buildah bud -f deploy/Dockerfile (chroot isolation)"
  mkdir -p "$bwork/context"
  git -C "$repo" archive --format=tar HEAD | tar -x -C "$bwork/context"
  "${lock_cmd[@]}" "${buildah[@]}" bud --isolation chroot --pull-never \
    -f deploy/Dockerfile -t localhost/byteps:bare-debian "$bwork/context" 2>&1 | stamp
  "${buildah[@]}" images
  # The image's programs start in it (the Dockerfile's own ldd check ran in its last stage).
  ctr=$("${buildah[@]}" from localhost/byteps:bare-debian)
  "${buildah[@]}" run --isolation chroot "$ctr" -- byteps-server --help | head -n 3
  "${buildah[@]}" rm "$ctr" >/dev/null
  end
fi
