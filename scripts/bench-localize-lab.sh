#!/usr/bin/env bash
# Localization benchmarks for `fabprobe ring` in the network lab (not run in CI: too slow).
# Needs root, iproute2, iptables.
#
#   scripts/bench-localize-lab.sh [healthy|accuracy|hang|scan8|all]
#
#   healthy   REPS healthy scans of N ranks (every data egress shaped tbf $RATE): the
#             false-positive rate (runs with any verdict) and the scan's time
#   accuracy  REPS randomized faults per degradation (30%, 50%, 70% of $RATE): one node's
#             egress (tbf) or one pair (htb + u32 filter on the destination); a run is right
#             when its verdicts are exactly the injected fault
#   hang      time to verdict (fault -> rank 0 exits, and the last rank exits) for a cut data
#             link (iptables DROP on eth1), SIGKILL of a rank, SIGSTOP of a rank, SIGKILL of
#             the coordinator; HANG_REPS runs each, --timeout $TIMEOUT
#   scan8     the scan alone with 8 ranks at the default --scan-time/--scan-bytes: its time
#   fixtures  rank 0's JSON of three real runs, for `sweep`'s tests (tests/data/ring-reports/):
#             healthy, node-c's egress at 300 Mbit/s (drain), node-b -> node-d at 300 Mbit/s
#             with the data bridge's ports to node-b and node-d sending LLDP (ticket, with
#             the switch ports); 4 ranks, the scan alone
#
# Environment: BIN (default target/release/fabprobe, else target/debug/fabprobe), RATE
# (default 1gbit), N (default 4), REPS (default 5), HANG_REPS (default 2), TIMEOUT (default 3),
# SCAN_ARGS (extra scan options, default "--scan-bytes 4M --scan-time 3"), SEED.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-}
if [ -z "$BIN" ]; then
  if [ -x target/release/fabprobe ]; then BIN=$PWD/target/release/fabprobe; else BIN=$PWD/target/debug/fabprobe; fi
fi
RATE=${RATE:-1gbit}
N=${N:-4}
REPS=${REPS:-5}
HANG_REPS=${HANG_REPS:-2}
TIMEOUT=${TIMEOUT:-3}
SCAN_ARGS=${SCAN_ARGS:---scan-bytes 4M --scan-time 3}
SEED=${SEED:-$$}
WHAT=${1:-all}
P=fpl$$z
MAXN=8
OUT=/tmp/$P
mkdir -p "$OUT"
RANDOM=$SEED

rate_mbit() { python3 -c "import re; m=re.fullmatch(r'([0-9.]+)([kmg]?)bit','$1'); print(float(m[1])*{'':1e-6,'k':1e-3,'m':1,'g':1e3}[m[2]])"; }

cleanup() {
  for i in $(seq 0 $((MAXN - 1))); do
    for p in $(ip netns pids "$P-n$i" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$P-n$i" 2>/dev/null || true
  done
  ip link del "${P}m" 2>/dev/null || true
  ip link del "${P}d" 2>/dev/null || true
}

lab_up() { # 8 nodes; runs use the first $n of them
  trap cleanup EXIT INT TERM
  ip link add "${P}m" type bridge && ip link set "${P}m" up
  ip link add "${P}d" type bridge && ip link set "${P}d" mtu 9000 up
  for i in $(seq 0 $((MAXN - 1))); do
    ns="$P-n$i"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "$P${i}m" type veth peer name eth0 netns "$ns"
    ip link set "$P${i}m" master "${P}m" up
    ip -n "$ns" addr add "198.18.0.$((10 + i))/24" dev eth0 && ip -n "$ns" link set eth0 up
    ip link add "$P${i}d" mtu 9000 type veth peer name eth1 mtu 9000 netns "$ns"
    ip link set "$P${i}d" master "${P}d" up
    ip -n "$ns" addr add "198.19.0.$((10 + i))/24" dev eth1 && ip -n "$ns" link set eth1 up
  done
  reset_shaping
}

reset_shaping() { # every data egress at $RATE, no filters, no firewall rules
  for i in $(seq 0 $((MAXN - 1))); do
    ip netns exec "$P-n$i" tc qdisc replace dev eth1 root tbf rate "$RATE" burst 512kb latency 100ms
    ip netns exec "$P-n$i" iptables -F INPUT 2>/dev/null || true
  done
}

shape_egress() { # node rate
  ip netns exec "$P-n$1" tc qdisc replace dev eth1 root tbf rate "$2" burst 512kb latency 100ms
}

shape_pair() { # from to rate: only what `from` sends to `to` at rate; the rest at $RATE
  local ns=$P-n$1
  ip netns exec "$ns" tc qdisc del dev eth1 root 2>/dev/null || true
  ip netns exec "$ns" tc qdisc add dev eth1 root handle 1: htb default 20
  ip netns exec "$ns" tc class add dev eth1 parent 1: classid 1:10 htb rate "$3" ceil "$3"
  ip netns exec "$ns" tc class add dev eth1 parent 1: classid 1:20 htb rate "$RATE" ceil "$RATE"
  ip netns exec "$ns" tc filter add dev eth1 parent 1: protocol ip prio 1 u32 match ip dst "198.19.0.$((10 + $2))/32" flowid 1:10
}

node() { # node I CMD...: in node I's namespace with its own hostname
  local i=$1; shift
  ip netns exec "$P-n$i" unshare --uts sh -c "hostname node-$(printf "\\$(printf %o $((97 + i)))"); exec \"\$0\" \"\$@\"" "$@"
}

# ring N TOKEN OUTFILE ARGS...: start ranks 1..N-1 in the background, rank 0 too; pids in PIDS
ring_start() {
  local n=$1 tok=$2 out=$3; shift 3
  PIDS=()
  for r in $(seq 0 $((n - 1))); do
    if [ "$r" = 0 ]; then
      node 0 "$BIN" ring --rank 0 --world "$n" --coordinator 198.18.0.10:29517 --ifname =eth1 --token "$tok" \
        --format json "$@" >"$out" 2>"$out.err0" &
    else
      node "$r" "$BIN" ring --rank "$r" --world "$n" --coordinator 198.18.0.10:29517 --ifname =eth1 --token "$tok" \
        "$@" >/dev/null 2>"$out.err$r" &
    fi
    PIDS+=($!)
  done
}

rank_pid() { # token rank -> the fabprobe process of that rank (the jobs are subshells)
  pgrep -f -- "ring --rank $2 --world [0-9]+ .*--token $1( |\$)" | head -1
}

verdicts_of() { # json file -> "kind:from:to kind:from:to" (sorted)
  python3 - "$1" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))["data"]
except Exception as e:
    print("NO-REPORT"); sys.exit(0)
v = sorted(f"{x['kind']}:{x['from_rank']}:{x['to_rank']}".replace("None", "-") for x in d["verdicts"])
print(" ".join(v) if v else "none")
PY
}

bench_healthy() {
  echo "== healthy scans: $REPS runs of $N ranks, data egress tbf $RATE, $SCAN_ARGS =="
  reset_shaping
  local fp=0 t
  for k in $(seq 1 "$REPS"); do
    # shellcheck disable=SC2086
    ring_start "$N" "h$k" "$OUT/h$k.json" --scan $SCAN_ARGS --timeout 10
    wait "${PIDS[@]}" || true
    v=$(verdicts_of "$OUT/h$k.json")
    t=$(python3 -c "import json; print(round(json.load(open('$OUT/h$k.json'))['data']['scan']['seconds'],2))" 2>/dev/null || echo "?")
    echo "  run $k: verdicts: $v; scan ${t} s"
    [ "$v" = none ] || fp=$((fp + 1))
  done
  echo "  false positives: $fp of $REPS runs"
}

bench_accuracy() {
  local full
  full=$(rate_mbit "$RATE")
  echo "== localization accuracy: $REPS random faults per degradation, $N ranks, $SCAN_ARGS =="
  for pct in 30 50 70; do
    local right=0
    for k in $(seq 1 "$REPS"); do
      reset_shaping
      local slow want
      slow="$(python3 -c "print(int($full*$pct/100))")mbit"
      if [ $((RANDOM % 2)) = 0 ]; then
        local a=$((RANDOM % N))
        shape_egress "$a" "$slow"
        want="slow_egress:$a:-"
      else
        local a=$((RANDOM % N)) b
        b=$(((a + 1 + RANDOM % (N - 1)) % N))
        shape_pair "$a" "$b" "$slow"
        want="slow_link:$a:$b"
      fi
      # shellcheck disable=SC2086
      ring_start "$N" "a$pct$k" "$OUT/a$pct-$k.json" --scan $SCAN_ARGS --timeout 10
      wait "${PIDS[@]}" || true
      got=$(verdicts_of "$OUT/a$pct-$k.json")
      if [ "$got" = "$want" ]; then right=$((right + 1)); mark=ok; else mark=WRONG; fi
      echo "  ${pct}%: injected $want, got $got: $mark"
    done
    echo "  ${pct}% of the rate: $right of $REPS localized exactly"
  done
  reset_shaping
}

# hang KIND: inject at 1.5 s into a long sweep of 3 ranks; print times and the verdict
hang_once() {
  local kind=$1 k=$2 f=$OUT/hang-$1-$2.json
  reset_shaping
  ring_start 3 "g$kind$k" "$f" --no-scan -b 8M -e 8M -n 100000 --timeout "$TIMEOUT"
  sleep 1.5
  local t0 victim
  t0=$(date +%s.%N)
  case $kind in
    cut) ip netns exec "$P-n2" iptables -A INPUT -i eth1 -s 198.19.0.11 -j DROP ;;
    kill) victim=$(rank_pid "g$kind$k" 2); kill -9 "$victim" ;;
    stop) victim=$(rank_pid "g$kind$k" 1); kill -STOP "$victim" ;;
    coord) victim=$(rank_pid "g$kind$k" 0); kill -9 "$victim" ;;
  esac
  local first=""
  local waitfor=("${PIDS[@]}")
  [ "$kind" = coord ] && waitfor=("${PIDS[1]}" "${PIDS[2]}")
  [ "$kind" = kill ] && waitfor=("${PIDS[0]}" "${PIDS[1]}")
  [ "$kind" = stop ] && waitfor=("${PIDS[0]}" "${PIDS[2]}")
  for p in "${waitfor[@]}"; do
    wait "$p" || true
    [ -n "$first" ] || first=$(date +%s.%N)
  done
  local last
  last=$(date +%s.%N)
  [ "$kind" = stop ] && kill -9 "$victim" 2>/dev/null || true
  wait 2>/dev/null || true
  local what
  if [ "$kind" = coord ]; then
    what=$(grep -o "COORDINATOR LOST rank [0-9]" "$f".err1 "$f".err2 2>/dev/null | wc -l)" of 2 ranks said COORDINATOR LOST"
  else
    what=$(verdicts_of "$f")
  fi
  printf "  %-5s run %d: first exit %.2f s, last exit %.2f s after the fault; %s\n" "$kind" "$k" \
    "$(echo "$first - $t0" | bc)" "$(echo "$last - $t0" | bc)" "$what"
}

bench_hang() {
  echo "== time to verdict, 3 ranks, --timeout $TIMEOUT, $HANG_REPS runs per kind =="
  for kind in cut kill stop coord; do
    for k in $(seq 1 "$HANG_REPS"); do hang_once "$kind" "$k"; done
  done
}

bench_scan8() {
  echo "== the scan alone, 8 ranks, default --scan-time and --scan-bytes, data egress tbf $RATE =="
  reset_shaping
  local s e
  s=$(date +%s.%N)
  ring_start 8 s8 "$OUT/s8.json" --scan --timeout 30
  wait "${PIDS[@]}" || true
  e=$(date +%s.%N)
  python3 - "$OUT/s8.json" "$(echo "$e - $s" | bc)" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["data"]; s = d["scan"]
print(f"  {len(s['orders'])} orders ({', '.join(o['name'] + (' re-check' if o['recheck'] else '') for o in s['orders'])}), "
      f"{s['reps']} x {s['bytes']} B per link and order: scan {s['seconds']:.2f} s, whole run {float(sys.argv[2]):.2f} s wall "
      f"(bootstrap {d['bootstrap_us']/1e3:.0f} ms); median link {s['median_gbs']:.4f} GB/s; verdicts: "
      + (", ".join(v['kind'] for v in d['verdicts']) or "none"))
PY
}

lldp_send() { # bridge-port system port seconds: an LLDP frame every 200 ms (what a switch sends)
  python3 - "$@" <<'PY' &
import socket, struct, sys, time
dev, system, port, secs = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
src = bytes([0x50, 0x6b, 0x4b, 0x11, 0x22, 0x33])
tlv = lambda t, v: struct.pack("!H", (t << 9) | len(v)) + v
pdu = tlv(1, b"\x04" + src) + tlv(2, b"\x05" + port.encode()) + tlv(3, struct.pack("!H", 120)) \
    + tlv(4, port.encode()) + tlv(5, system.encode()) + tlv(0, b"")
frame = bytes([1, 0x80, 0xc2, 0, 0, 0x0e]) + src + struct.pack("!H", 0x88cc) + pdu
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((dev, 0))
end = time.time() + secs
while time.time() < end:
    s.send(frame)
    time.sleep(0.2)
PY
}

fixtures() {
  local dir=tests/data/ring-reports args="--scan --scan-bytes 4M --scan-time 2 --timeout 10"
  mkdir -p "$dir"
  reset_shaping
  # shellcheck disable=SC2086
  ring_start 4 fxh "$dir/healthy.json" $args; wait "${PIDS[@]}" || true
  shape_egress 2 300mbit
  # shellcheck disable=SC2086
  ring_start 4 fxe "$dir/slow-egress-node-c.json" $args; wait "${PIDS[@]}" || true
  reset_shaping
  shape_pair 1 3 300mbit
  lldp_send "${P}1d" leaf-07 Ethernet1/2 20; local s1=$!
  lldp_send "${P}3d" leaf-07 Ethernet1/4 20; local s3=$!
  # shellcheck disable=SC2086
  ring_start 4 fxp "$dir/slow-pair-b-d-lldp.json" $args --lldp-wait 3; wait "${PIDS[@]}" || true
  kill "$s1" "$s3" 2>/dev/null || true
  rm -f "$dir"/*.err*
  for f in healthy slow-egress-node-c slow-pair-b-d-lldp; do
    echo "$f: $(verdicts_of "$dir/$f.json")"
  done
}

lab_up
case "$WHAT" in
  fixtures) fixtures ;;
  healthy) bench_healthy ;;
  accuracy) bench_accuracy ;;
  hang) bench_hang ;;
  scan8) bench_scan8 ;;
  all) bench_healthy; bench_accuracy; bench_hang; bench_scan8 ;;
  *) echo "usage: $0 [healthy|accuracy|hang|scan8|fixtures|all]" >&2; exit 2 ;;
esac
