#!/usr/bin/env bash
# scripts/install-deps.sh is the one list of the Debian packages byteps needs:
#  1. its --print-packages groups: the default is what it installs, an unknown group is refused;
#  2. every package or program the CMake files and the tests look for (find_package,
#     find_program, `command -v`) has its Debian package in the list, through the table below;
#     a new one fails here until the table, and the list, know it;
#  3. deploy/Dockerfile installs only what the script prints, and nothing of its own;
#  4. the runtime group (the image's last stage) is what the build group's -dev packages bring
#     here, so that the image loads what the build linked.
# Reads files only: no build, no network.
#   dependencies_check.sh REPOSITORY_ROOT
set -uo pipefail
root=${1:?usage: dependencies_check.sh REPOSITORY_ROOT}
deps=$root/scripts/install-deps.sh
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# 1. The groups. A script without --print-packages would install instead: not run then.
grep -qF -- '--print-packages' "$deps" || {
  echo "FAIL: scripts/install-deps.sh has no --print-packages: it cannot be the one list"
  failures=$((failures + 1))
}
if ((failures > 0)); then
  all='' build='' runtime=''
else
  all=$(bash "$deps" --print-packages) || fail "install-deps.sh --print-packages exited $?"
  groups=$(bash "$deps" --print-packages build test node) || fail "--print-packages build test node failed"
  [[ $all == "$groups" ]] ||
    fail "--print-packages printed '$all', expected the groups build test node: '$groups'"
  build=$(bash "$deps" --print-packages build) || fail "--print-packages build failed"
  runtime=$(bash "$deps" --print-packages runtime) || fail "--print-packages runtime failed"
  err=$(bash "$deps" --print-packages gpu 2>&1 >/dev/null)
  status=$?
  [[ $status == 2 && $err == "install-deps: unknown group 'gpu': expected build, test, node, runtime, clang or ci" ]] ||
    fail "--print-packages gpu exited $status saying '$err'"
  err=$(bash "$deps" --print 2>&1 >/dev/null)
  status=$?
  [[ $status == 2 && $err == "install-deps: unknown argument '--print'; usage: install-deps.sh [--also clang|ci]... or install-deps.sh --print-packages [GROUP]..." ]] ||
    fail "install-deps.sh --print exited $status saying '$err'"
fi
in_list() {  # in_list PACKAGE LIST
  [[ " $2 " == *" $1 "* ]]
}

# 2. What is looked for, and the Debian packages that provide it ("-": nothing to install: the
# C library, dpkg, this project, or GPU builds, which need NVIDIA's packages).
declare -A package_of=(
  [Threads]=- [byteps]=- [CUDAToolkit]=- [NCCL]=- [PkgConfig]=-
  [fmt]=libfmt-dev [asio]=libasio-dev [OpenSSL]=libssl-dev
  [RdmaCore]="libibverbs-dev librdmacm-dev" [Catch2]=catch2 [Python3]=python3
  [openssl]=openssl [gnuplot]=gnuplot-nox [node]="nodejs npm" [srun]=slurm-wlm [scontrol]=slurm-wlm
  [python3]=python3
  [byteps-server]=- [dpkg-query]=- [Torch]=libtorch-dev
  [unshare]=- [taskset]=-  # util-linux: in every Debian, minbase too (scripts/install-deps.sh)
)
mapfile -t wanted < <(
  cd "$root" &&
    {
      grep -rhoE 'find_(package|dependency)\(\s*[A-Za-z0-9_]+' CMakeLists.txt cmake tests examples tools \
        --include=CMakeLists.txt --include='*.cmake' --include='*.cmake.in' | sed -E 's/.*\(\s*//'
      grep -rhoE 'find_program\(\s*[A-Za-z0-9_]+\s+[A-Za-z0-9_.+-]+' CMakeLists.txt cmake tests examples tools \
        --include=CMakeLists.txt --include='*.cmake' | awk '{print $NF}'
      grep -rhoE 'command -v [A-Za-z0-9_.+-]+' tests tools scripts/test.sh scripts/main-job.sh |
        awk '{print $3}'
    } | sort -u
)
((${#wanted[@]} >= 10)) || fail "found only ${#wanted[@]} packages and programs looked for: ${wanted[*]}"
for name in "${wanted[@]}"; do
  if [[ -z ${package_of[$name]+set} ]]; then
    fail "'$name' is looked for (find_package, find_program or command -v) but this test does not know its Debian package: add it to package_of, and the package to scripts/install-deps.sh"
    continue
  fi
  for p in ${package_of[$name]}; do
    [[ $p == - ]] && continue
    in_list "$p" "$all" || fail "'$name' is looked for, but its package $p is not in install-deps.sh's list ($all)"
  done
done
for p in libssl-dev; do  # configure fails without these
  in_list "$p" "$build" || fail "$p is not in the build group ($build)"
done

# 3. The Dockerfile: every apt-get install takes the packages the script printed, from a copy of
# the script, and names none itself.
dockerfile=$root/deploy/Dockerfile
mapfile -t installs < <(awk '
  /^(#|RUN|FROM|COPY|WORKDIR|USER|CMD|ENV|ARG)/ { if (cmd != "") print cmd; cmd = "" }
  /^RUN/ { cmd = $0; next }
  cmd != "" { cmd = cmd " " $0 }
  END { if (cmd != "") print cmd }' "$dockerfile" | grep 'apt-get install')
((${#installs[@]} == 2)) || fail "deploy/Dockerfile has ${#installs[@]} apt-get install steps, expected 2 (build and final stage)"
for step in "${installs[@]}"; do
  group=$(sed -nE 's/.*packages=\$\(bash \/tmp\/install-deps\.sh --print-packages ([a-z]+)\).*/\1/p' <<<"$step")
  [[ $group == build || $group == runtime ]] ||
    fail "a Dockerfile step does not take its packages from install-deps.sh --print-packages build|runtime: $step"
  # What follows the options of apt-get install must be $packages alone.
  rest=$(sed -nE 's/.*apt-get install -y --no-install-recommends (.*)/\1/p' <<<"$step" |
    sed -E 's/&&.*//; s/\\//g' | xargs)
  [[ $rest == '$packages' ]] || fail "a Dockerfile step installs '$rest' besides the script's list: $step"
done
copies=$(grep -c '^COPY scripts/install-deps.sh /tmp/install-deps.sh$' "$dockerfile")
[[ $copies == 2 ]] || fail "deploy/Dockerfile copies scripts/install-deps.sh into $copies stages, expected 2"

# 4. The runtime group is what the build group's -dev packages depend on (Depends of the
# installed packages: install-deps.sh installed them; dpkg-query needs no package lists).
brought=" "
command -v dpkg-query >/dev/null || { echo "FAIL: no dpkg-query: byteps is built on Debian 12 (README)"; exit 1; }
for p in $build; do
  deps_of=$(dpkg-query -W -f='${Depends}' "$p" 2>/dev/null) || { fail "$p is not installed (run scripts/install-deps.sh)"; continue; }
  brought+="$(tr ',|' '\n\n' <<<"$deps_of" | sed -E 's/\(.*\)//; s/:any//' | xargs) "
done
for p in $runtime; do
  in_list "$p" "$brought" || fail "runtime package $p is no dependency of the build group's packages ($build)"
done

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "ok: the packages of all ${#wanted[@]} names looked for (${wanted[*]}) are in install-deps.sh's list; deploy/Dockerfile installs its groups build ($build) and runtime ($runtime)"
