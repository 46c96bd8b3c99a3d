#!/usr/bin/env bash
# emulate.sh: an emulated cluster on one machine. H hosts, each a network namespace with one
# interface (eth0, address SUBNET.(i+1)/24) on a veth pair to a Linux bridge in a "switch"
# namespace. Every host's link is shaped with tbf on BOTH ends of its veth (host side: its
# upload, switch side: its download), GSO/TSO packets are capped below the tbf burst, and TCP
# inside each host uses reno (see ../shared/EMULATION.md for why each of these matters).
#
# Everything lives in namespaces this script creates: the root namespace gets no address, no
# route and no link. Everything is deleted on exit, also on SIGINT/SIGTERM/SIGHUP; processes
# left running inside the namespaces are ended first.
#
# Needs root, iproute2 (ip, tc), and iperf3 for --verify.
set -euo pipefail

prog=$(basename "$0")

usage() {
  cat <<EOF
Usage: $prog [OPTIONS] [--each 'COMMAND'] [-- DRIVER [ARGS...]]

Creates H emulated hosts, optionally verifies the shaping with a plain TCP transfer, then runs
COMMAND on every host and/or DRIVER in the root namespace, and deletes everything it made.

Options:
  --hosts H        number of hosts (default 2)
  --rate R         each host's link rate, both directions, in tc units: 1gbit, 400mbit, ...
                   (default 1gbit)
  --burst BYTES    tbf burst (default 65536; K/M suffixes are binary)
  --limit BYTES    tbf queue limit (default 16M: above what TCP keeps queued per socket, about
                   4 MiB here, times a few sockets; a smaller one drops the hosts' own packets)
  --gso BYTES      cap on GSO/TSO super-packets (default: burst/2, at most 65536)
  --upload-queue Q how a host's upload queue serves its packets: fifo (default: tbf's own queue)
                   or fair (one queue per peer host, served in turn by bytes: what a host whose
                   qdisc shares its link between flows, fq or fq_codel, does for one flow per
                   peer; this kernel has neither, so htb with a u32 filter per peer address,
                   under tbf, each queue --limit / H). The switch side stays fifo.
  --cc NAME        TCP congestion control inside the hosts (default reno; bbr to compare;
                   cubic cannot be chosen inside a child namespace on this kernel)
  --subnet A.B.C   host i gets A.B.C.(i+1)/24 (default 10.77.0), inside its namespace only
  --name PREFIX    namespace names are PREFIX-h0 .. PREFIX-h(H-1) and PREFIX-sw
                   (default bpsemu<pid>)
  --verify [S]     before anything else, run iperf3 for S seconds (default 5) from host 0 to
                   host 1 and back, and print the goodput against the tbf rate
  --verify-load [S] then load every link at once: host i and host i+H/2 exchange data both
                   ways (iperf3 --bidir) for S seconds (default 5); prints each flow's goodput
                   and the total, so that you see whether this machine's CPUs, rather than the
                   links, limit the emulated cluster when all hosts talk
  --each CMD       run 'bash -c CMD' inside every host at once; waits for all, fails if any does
  -- DRIVER ...    run DRIVER in the root namespace once the hosts are up; it places processes
                   on host i with: ip netns exec "\${EMU_NS_ARRAY[i]}" ... (or the names in \$EMU_NS)
  --help           print this help

Environment for COMMAND and DRIVER:
  EMU_HOSTS        H
  EMU_NS           the host namespaces, space separated, host 0 first
  EMU_ADDRS        the host addresses, space separated, host 0 first
  EMU_RATE         the rate as given (e.g. 1gbit); EMU_RATE_GBPS the same in Gbit/s
  EMU_DIR          a scratch directory, deleted at the end (rendezvous files, logs)
  EMU_HOST         COMMAND only: this host's index; EMU_ADDR its address

Examples:
  sudo $prog --hosts 2 --rate 200mbit --verify 5
  sudo $prog --hosts 4 --rate 400mbit --each 'echo host \$EMU_HOST is \$EMU_ADDR'
  sudo $prog --hosts 8 --rate 1gbit -- benchmarks/run-emulated.sh --inside ...
EOF
}

die() {
  echo "$prog: error: $*" >&2
  exit 2
}

# "64K" -> 65536; plain numbers are bytes.
to_bytes() {
  local v=$1
  case $v in
    *[kK] | *[kK][bB] | *[kK][iI][bB]) echo $((${v%%[kK]*} * 1024)) ;;
    *[mM] | *[mM][bB] | *[mM][iI][bB]) echo $((${v%%[mM]*} * 1024 * 1024)) ;;
    *[0-9]) echo $((v)) ;;
    *) die "'$v' is not a byte count (e.g. 65536, 64K, 16M)" ;;
  esac
}

# tc rate ("1gbit", "400mbit", "100kbit", "1000000bit") -> Gbit/s
rate_gbps() {
  local r=${1,,} num mult
  case $r in
    *gbit) num=${r%gbit} mult=1000000000 ;;
    *mbit) num=${r%mbit} mult=1000000 ;;
    *kbit) num=${r%kbit} mult=1000 ;;
    *bit) num=${r%bit} mult=1 ;;
    *) die "--rate '$1': use tc's bit units (1gbit, 400mbit, ...)" ;;
  esac
  [[ $num =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--rate '$1' is not a rate"
  awk -v n="$num" -v m="$mult" 'BEGIN { printf "%.6g", n * m / 1e9 }'
}

hosts=2
rate=1gbit
burst=65536
limit=$((16 * 1024 * 1024))
gso=
upload_queue=fifo
cc=reno
subnet=10.77.0
name=bpsemu$$
verify=0
verify_load=0
each=
driver=()
while (($# > 0)); do
  case $1 in
    --hosts) hosts=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --burst) burst=$(to_bytes "${2:?}"); shift 2 ;;
    --limit) limit=$(to_bytes "${2:?}"); shift 2 ;;
    --gso) gso=$(to_bytes "${2:?}"); shift 2 ;;
    --upload-queue) upload_queue=${2:?}; shift 2 ;;
    --cc) cc=${2:?}; shift 2 ;;
    --subnet) subnet=${2:?}; shift 2 ;;
    --name) name=${2:?}; shift 2 ;;
    --verify)
      if [[ ${2:-} =~ ^[0-9]+$ ]]; then verify=$2; shift 2; else verify=5; shift; fi
      ;;
    --verify-load)
      if [[ ${2:-} =~ ^[0-9]+$ ]]; then verify_load=$2; shift 2; else verify_load=5; shift; fi
      ;;
    --each) each=${2:?}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; driver=("$@"); break ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
if ! [[ $hosts =~ ^[0-9]+$ ]] || ((hosts < 1 || hosts > 200)); then die "--hosts must be 1 .. 200"; fi
[[ $subnet =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--subnet '$subnet': expected three octets, e.g. 10.77.0"
[[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || die "--name '$name': letters, digits, . _ - only"
((verify == 0 || hosts >= 2)) || die "--verify needs at least 2 hosts"
((verify_load == 0 || hosts >= 2)) || die "--verify-load needs at least 2 hosts"
((EUID == 0)) || die "needs root (network namespaces, tc)"
command -v ip >/dev/null || die "needs iproute2 (ip)"
command -v tc >/dev/null || die "needs iproute2 (tc)"
if ((verify > 0 || verify_load > 0)); then command -v iperf3 >/dev/null || die "--verify needs iperf3 (scripts/install-bench-deps.sh)"; fi
rate_g=$(rate_gbps "$rate")
[[ -n $gso ]] || gso=$((burst / 2 < 65536 ? burst / 2 : 65536))
((gso >= 1500)) || die "--gso $gso is below one MTU-sized packet; raise --burst or --gso"
((limit >= burst)) || die "--limit must be >= --burst"
[[ $upload_queue == fifo || $upload_queue == fair ]] ||
  die "--upload-queue '$upload_queue': fifo or fair"

sw=$name-sw
ns=()
addrs=()
for ((i = 0; i < hosts; i++)); do
  ns+=("$name-h$i")
  addrs+=("$subnet.$((i + 1))")
done
for n in "$sw" "${ns[@]}"; do
  if ip netns list | awk '{print $1}' | grep -qx -- "$n"; then
    die "namespace $n already exists (another run? pick --name)"
  fi
done

made=()     # namespaces this run created, in creation order
emu_dir=
children=() # background pids this script started
cleaned=0

# shellcheck disable=SC2317 # runs from the traps
cleanup() {
  ((cleaned)) && return
  cleaned=1
  local n p pids
  for p in "${children[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  # Whatever still runs inside our namespaces was started by this run: end it by pid.
  for n in "${made[@]}"; do
    pids=$(ip netns pids "$n" 2>/dev/null || true)
    for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
  done
  sleep 0.2
  for n in "${made[@]}"; do
    pids=$(ip netns pids "$n" 2>/dev/null || true)
    for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
  done
  for p in "${children[@]}"; do wait "$p" 2>/dev/null || true; done
  # Deleting a namespace deletes its veth ends (and so their peers) and the bridge.
  for n in "${made[@]}"; do ip netns delete "$n" 2>/dev/null || true; done
  [[ -n $emu_dir ]] && rm -rf -- "$emu_dir"
  return 0
}
# shellcheck disable=SC2317
on_signal() {
  trap - INT TERM HUP
  echo "$prog: interrupted (SIG$1); deleting the emulated cluster" >&2
  cleanup
  exit "$2"
}
trap cleanup EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

emu_dir=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")

# shape DEV-in-NAMESPACE [fair]: tbf as root qdisc, GSO/TSO capped below the burst; with
# "fair", tbf's queue is an htb whose classes, one per peer address and one for the rest, are
# served in turn a quantum at a time: their rates are above the link's, so only tbf limits
# (10gbit: at 100gbit this kernel's htb no longer took turns).
shape() {
  local n=$1 dev=$2 queue=${3:-fifo} j
  ip -n "$n" link set dev "$dev" gso_max_size "$gso"
  # Kernels with BIG TCP have a separate IPv4 cap; older ones do not know the keyword.
  ip -n "$n" link set dev "$dev" gso_ipv4_max_size "$gso" 2>/dev/null || true
  tc -n "$n" qdisc replace dev "$dev" root handle 1: tbf rate "$rate" burst "$burst" limit "$limit"
  [[ $queue == fair ]] || return 0
  local share=$((limit / hosts > burst ? limit / hosts : burst)) class
  tc -n "$n" qdisc add dev "$dev" parent 1:1 handle 10: htb default 1
  # Class 10:1 takes what no filter names; peer j gets 10:(j + 2), written in hex as tc reads it.
  for ((j = -1; j < hosts; j++)); do
    class=10:$(printf '%x' $((j + 2)))
    tc -n "$n" class add dev "$dev" parent 10: classid "$class" htb rate 10gbit quantum 65536
    tc -n "$n" qdisc add dev "$dev" parent "$class" bfifo limit "$share"
    ((j < 0)) || tc -n "$n" filter add dev "$dev" parent 10: protocol ip prio 1 u32 \
      match ip dst "${addrs[j]}/32" flowid "$class"
  done
}

ip netns add "$sw"
made+=("$sw")
ip -n "$sw" link set lo up
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
for ((i = 0; i < hosts; i++)); do
  h=${ns[i]}
  ip netns add "$h"
  made+=("$h")
  ip -n "$h" link set lo up
  # Created inside the switch namespace with its peer placed straight into the host's: the root
  # namespace never holds either end.
  ip -n "$sw" link add "h$i" type veth peer name eth0 netns "$h"
  ip -n "$sw" link set "h$i" master br0
  ip -n "$sw" link set "h$i" up
  ip -n "$h" addr add "${addrs[i]}/24" dev eth0
  ip -n "$h" link set eth0 up
  shape "$h" eth0 "$upload_queue" # upload
  shape "$sw" "h$i" # download
  ip netns exec "$h" sysctl -q -w net.ipv4.tcp_congestion_control="$cc" >/dev/null ||
    die "cannot set congestion control '$cc' inside $h"
done
# Wait until the bridge forwards (ports leave the listening state) by pinging the last host.
if ((hosts >= 2)); then
  for _ in $(seq 50); do
    ip netns exec "${ns[0]}" ping -c1 -W1 "${addrs[hosts - 1]}" >/dev/null 2>&1 && break
    sleep 0.1
  done
fi
echo "$prog: $hosts hosts (${ns[0]} .. ${ns[hosts - 1]}, ${addrs[0]} .. ${addrs[hosts - 1]}), links $rate" \
  "(tbf burst $burst limit $limit, gso cap $gso, upload queue $upload_queue), tcp $cc" >&2

export EMU_HOSTS=$hosts EMU_NS="${ns[*]}" EMU_ADDRS="${addrs[*]}" EMU_RATE=$rate \
  EMU_RATE_GBPS=$rate_g EMU_DIR=$emu_dir

# iperf3 from host a to host b for S seconds; prints the receiver's goodput in Mbit/s.
iperf_goodput() {
  local a=$1 b=$2 secs=$3 port=5201 out
  ip netns exec "${ns[b]}" iperf3 -s -1 -B "${addrs[b]}" -p $port >/dev/null 2>&1 &
  local server=$!
  children+=("$server")
  # Wait (at most 5 s) until the server listens.
  for _ in $(seq 50); do
    ip netns exec "${ns[b]}" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    sleep 0.1
  done
  out=$(ip netns exec "${ns[a]}" iperf3 -c "${addrs[b]}" -p $port -t "$secs" -O 1 -f m 2>&1) || {
    echo "$out" >&2
    return 1
  }
  wait "$server" 2>/dev/null || true
  echo "$out" | awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i == "Mbits/sec") print $(i - 1) }' | tail -1
}

if ((verify > 0)); then
  rate_mbit=$(awk -v g="$rate_g" 'BEGIN { printf "%.1f", g * 1000 }')
  for dir in "0 1" "1 0"; do
    read -r a b <<<"$dir"
    g=$(iperf_goodput "$a" "$b" "$verify") || die "iperf3 from host $a to host $b failed"
    [[ -n $g ]] || die "iperf3 from host $a to host $b printed no receiver rate"
    echo "$prog: verify: TCP goodput host $a -> host $b: $g Mbit/s over a $rate_mbit Mbit/s tbf" \
      "= $(awk -v g="$g" -v r="$rate_mbit" 'BEGIN { printf "%.3f", g / r }') of the rate" \
      "(about 0.956 expected at MTU 1500)"
  done
fi

if ((verify_load > 0)); then
  half=$((hosts / 2))
  load_pids=()
  for ((i = 0; i < half; i++)); do
    ip netns exec "${ns[i + half]}" iperf3 -s -1 -B "${addrs[i + half]}" -p 5202 >/dev/null 2>&1 &
    children+=($!)
    load_pids+=($!)
  done
  for ((i = 0; i < half; i++)); do
    for _ in $(seq 50); do
      ip netns exec "${ns[i + half]}" ss -Hltn "sport = :5202" 2>/dev/null | grep -q . && break
      sleep 0.1
    done
  done
  clients=()
  for ((i = 0; i < half; i++)); do
    ip netns exec "${ns[i]}" iperf3 -c "${addrs[i + half]}" -p 5202 -t "$verify_load" -O 1 --bidir \
      -f m >"$emu_dir/load-$i.txt" 2>&1 &
    children+=($!)
    clients+=($!)
  done
  for p in "${clients[@]}" "${load_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rate_mbit=$(awk -v g="$rate_g" 'BEGIN { printf "%.1f", g * 1000 }')
  for ((i = 0; i < half; i++)); do
    awk -v i=$i -v j=$((i + half)) '/receiver/ {
        for (k = 1; k <= NF; k++) if ($k == "Mbits/sec") v = $(k - 1)
        dir = ($0 ~ /TX-C/) ? i " -> " j : j " -> " i
        print "FLOW", dir, v }' "$emu_dir/load-$i.txt"
  done | awk -v r="$rate_mbit" -v p="$prog" '
      $1 == "FLOW" { printf "%s: verify-load: host %s %s: %s Mbit/s = %.3f of the rate\n", p, $2, $3 " " $4, $5, $5 / r
                     sum += $5; n++ }
      END { if (n) printf "%s: verify-load: %d flows at once, total %.0f Mbit/s, mean %.3f of the rate\n", p, n, sum, sum / n / r
            else print p ": verify-load: iperf3 printed nothing" }'
fi

rc=0
if [[ -n $each ]]; then
  each_pids=()
  for ((i = 0; i < hosts; i++)); do
    EMU_HOST=$i EMU_ADDR=${addrs[i]} ip netns exec "${ns[i]}" bash -c "$each" &
    each_pids+=($!)
    children+=($!)
  done
  for ((i = 0; i < hosts; i++)); do
    r=0
    wait "${each_pids[i]}" || r=$?
    if ((r != 0)); then
      echo "$prog: host $i: command exited $r" >&2
      rc=$r
    fi
  done
fi
if ((${#driver[@]} > 0)); then
  r=0
  "${driver[@]}" || r=$?
  ((r == 0)) || rc=$r
fi
exit "$rc"
