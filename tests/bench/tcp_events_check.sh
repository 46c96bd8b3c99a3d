#!/usr/bin/env bash
# tcp-events.py report on a made-up record of two hosts: every row's sum of kernel counters and
# the retransmissions not reported back as duplicates, worked out by hand; --all lists each
# counter that rose. A file that is not a record is refused by name.
set -euo pipefail
script=${1:?usage: tcp_events_check.sh PATH/tcp-events.py}
dir=$(mktemp -d "${TMPDIR:-/tmp}/tcp-events.XXXXXX")
trap 'rm -rf "$dir"' EXIT

# Host 0 retransmitted 10 segments, 7 reported back as duplicates; host 1 none, but it saw 4
# segments out of order and entered recovery twice on reordering (SACK 2, timestamps 1).
cat > "$dir/record.json" <<'JSON'
{"hosts": [
 {"host": 0, "programs": ["byteps-server"],
  "counters": {"Tcp.OutSegs": 1000, "Tcp.RetransSegs": 10, "TcpExt.TCPDSACKRecvSegs": 7,
               "TcpExt.TCPSackRecovery": 3, "TcpExt.TCPLossProbes": 2, "TcpExt.TCPTimeouts": 1,
               "TcpExt.TCPPartialUndo": 2, "TcpExt.TCPDSACKUndo": 1}},
 {"host": 1, "programs": ["bps-bench"],
  "counters": {"Tcp.OutSegs": 500, "TcpExt.TCPOFOQueue": 4, "TcpExt.TCPSackRecovery": 2,
               "TcpExt.TCPSACKReorder": 2, "TcpExt.TCPTSReorder": 1}}
]}
JSON
got=$("$script" report "$dir/record.json" | tr -s ' ')
want="# event h0 byteps-server h1 bps-bench
segments sent 1000 500
retransmitted 10 0
 reported back as duplicates 7 0
 not reported (lost at most) 3 0
recoveries (SACK) 3 2
 reordering detected 0 3
 undone 3 0
tail-loss probes 2 0
retransmission timeouts 1 0
received out of order 0 4"
if [[ "$got" != "$want" ]]; then
  printf 'tcp-events.py report printed:\n%s\nexpected:\n%s\n' "$got" "$want" >&2
  exit 1
fi
got=$("$script" report "$dir/record.json" --all | tr -s ' ' | grep '^TcpExt.TCPTSReorder ')
[[ $got == "TcpExt.TCPTSReorder 0 1" ]] || { echo "--all printed: $got" >&2; exit 1; }

# Errors name what is wrong.
echo '{"hosts": 3}' > "$dir/bad.json"
if msg=$("$script" report "$dir/bad.json" 2>&1); then
  echo "tcp-events.py accepted a file that is not a record" >&2
  exit 1
fi
[[ $msg == *"$dir/bad.json: not a record of tcp-events.py record"* ]] ||
  { echo "unclear message: $msg" >&2; exit 1; }
echo '{"hosts": []}' > "$dir/none.json"
if msg=$("$script" report "$dir/none.json" 2>&1); then
  echo "tcp-events.py accepted a record without hosts" >&2
  exit 1
fi
[[ $msg == *"no hosts recorded"* ]] || { echo "unclear message: $msg" >&2; exit 1; }
echo "tcp-events.py report: rows as worked out by hand; errors named"
