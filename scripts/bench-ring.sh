#!/usr/bin/env bash
# Benchmarks for `fabprobe ring` (not run in CI). Needs root and iproute2; the Open MPI
# comparison needs `apt-get install openmpi-bin libopenmpi-dev`.
#
#   scripts/bench-ring.sh [lab|rails|mpi|local|bootstrap|all]
#
#   lab        4 namespaces, data links shaped with tc tbf at $RATE (default 1gbit), fabprobe
#              busbw per size vs the shaped rate (target >= 92% at 64 MiB and above)
#   rails      the same namespaces with a second data bridge (eth2, rail 1), both data links
#              shaped to $RATE: `ring --rails all --transport tcp`, each rail's busbw per size
#              vs the shaped rate, all rails at once; every tbf read back (tc -s: it must have
#              sent bytes and throttled, else the run is refused)
#   mpi        Open MPI MPI_Allreduce (TCP BTL on the same data links), ratio per size
#   local      fabprobe ring --local 4 on loopback: busbw and CPU time
#   bootstrap  --local 32: bootstrap time (coordinator: first hello to full table)
#
# Environment: BIN (default target/release/fabprobe), RATE, N (ranks, default 4),
# MINB/MAXB (bytes, default 1 MiB / 256 MiB), ITERS (default 5), MTU (data links, default 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/target/release/fabprobe}
RATE=${RATE:-1gbit}
N=${N:-4}
MINB=${MINB:-1048576}
MAXB=${MAXB:-268435456}
ITERS=${ITERS:-5}
MTU=${MTU:-9000}
WHAT=${1:-all}
P=fpl$$b
export LAB_PREFIX=$P

rate_gbs() { # tc rate -> 10^9 bytes/s
  python3 -c "import re,sys; m=re.fullmatch(r'([0-9.]+)([kmg]?)bit','$1'); print(float(m[1])*{'':1,'k':1e3,'m':1e6,'g':1e9}[m[2]]/8/1e9)"
}

cleanup() {
  for i in $(seq 0 $((N - 1))); do
    for p in $(ip netns pids "$P-n$i" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$P-n$i" 2>/dev/null || true
  done
  ip link del "${P}m" 2>/dev/null || true
  ip link del "${P}d" 2>/dev/null || true
  ip link del "${P}r" 2>/dev/null || true
}

lab_up() {
  trap cleanup EXIT INT TERM
  ip link add "${P}m" type bridge && ip link set "${P}m" up
  ip link add "${P}d" type bridge && ip link set "${P}d" mtu "$MTU" up
  for i in $(seq 0 $((N - 1))); do
    ns="$P-n$i"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "$P${i}m" type veth peer name eth0 netns "$ns"
    ip link set "$P${i}m" master "${P}m" up
    ip -n "$ns" addr add "198.18.0.$((10 + i))/24" dev eth0 && ip -n "$ns" link set eth0 up
    ip link add "$P${i}d" mtu "$MTU" type veth peer name eth1 mtu "$MTU" netns "$ns"
    ip link set "$P${i}d" master "${P}d" up
    ip -n "$ns" addr add "198.19.0.$((10 + i))/24" dev eth1 && ip -n "$ns" link set eth1 up
    ip netns exec "$ns" tc qdisc add dev eth1 root tbf rate "$RATE" burst 512kb latency 100ms
  done
}

rail_up() { # a second data bridge: eth2 on 198.19.1.0/24 (rail 1), shaped like eth1
  ip link add "${P}r" type bridge && ip link set "${P}r" mtu "$MTU" up
  for i in $(seq 0 $((N - 1))); do
    ns="$P-n$i"
    ip link add "$P${i}r" mtu "$MTU" type veth peer name eth2 mtu "$MTU" netns "$ns"
    ip link set "$P${i}r" master "${P}r" up
    ip -n "$ns" addr add "198.19.1.$((10 + i))/24" dev eth2 && ip -n "$ns" link set eth2 up
    ip netns exec "$ns" tc qdisc add dev eth2 root tbf rate "$RATE" burst 512kb latency 100ms
  done
}

node() { # node I CMD...: run in node I's namespace with its own hostname
  local i=$1; shift
  ip netns exec "$P-n$i" unshare --uts sh -c "hostname node-$(printf "\\$(printf %o $((97 + i)))"); exec \"\$0\" \"\$@\"" "$@"
}

bench_lab() {
  echo "== fabprobe ring, $N ranks in the lab, data links MTU $MTU shaped tbf $RATE ($(rate_gbs "$RATE") GB/s) =="
  local out=/tmp/$P-fabprobe.json
  for r in $(seq 1 $((N - 1))); do
    node "$r" "$BIN" ring --rank "$r" --world "$N" --coordinator 198.18.0.10:29517 --ifname =eth1 --token bench \
      -b "$MINB" -e "$MAXB" -n "$ITERS" --timeout 60 >/dev/null &
  done
  node 0 "$BIN" ring --rank 0 --world "$N" --coordinator 198.18.0.10:29517 --ifname =eth1 --token bench \
    -b "$MINB" -e "$MAXB" -n "$ITERS" --timeout 60 --format json >"$out"
  wait
  python3 - "$out" "$(rate_gbs "$RATE")" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["data"]; rate = float(sys.argv[2])
print(f"{'size':>12} {'time_us':>12} {'busbw GB/s':>11} {'% of rate':>9} {'wrong':>6}")
for r in d["results"]:
    print(f"{r['size_bytes']:>12} {r['time_us']:>12.1f} {r['busbw_gbs']:>11.4f} {100*r['busbw_gbs']/rate:>8.1f}% {r['wrong']:>6}")
for l in d["links"]:
    print(f"  hop {l['from_rank']}->{l['to_rank']} ({l['from_host']}->{l['to_host']}): {l['gbs']:.4f} GB/s = {100*l['gbs']/rate:.1f}% of rate")
PY
}

bench_rails() {
  echo "== fabprobe ring --rails all --transport tcp, $N ranks x 2 rails (eth1, eth2), each shaped tbf $RATE ($(rate_gbs "$RATE") GB/s) =="
  local out=/tmp/$P-rails.json before=/tmp/$P-tc-before
  : >"$before"
  for i in $(seq 0 $((N - 1))); do
    for d in eth1 eth2; do
      echo "n$i $d $(ip netns exec "$P-n$i" tc -s qdisc show dev $d | tr '\n' ' ')" >>"$before"
    done
  done
  for r in $(seq 1 $((N - 1))); do
    node "$r" "$BIN" ring --rank "$r" --world "$N" --coordinator 198.18.0.10:29517 --ifname =eth1,eth2 --rails all \
      --transport tcp --token bench --no-scan -b "$MINB" -e "$MAXB" -n "$ITERS" --timeout 60 >/dev/null &
  done
  node 0 "$BIN" ring --rank 0 --world "$N" --coordinator 198.18.0.10:29517 --ifname =eth1,eth2 --rails all \
    --transport tcp --token bench --no-scan -b "$MINB" -e "$MAXB" -n "$ITERS" --timeout 60 --format json >"$out"
  wait
  local after=/tmp/$P-tc-after
  : >"$after"
  for i in $(seq 0 $((N - 1))); do
    for d in eth1 eth2; do
      echo "n$i $d $(ip netns exec "$P-n$i" tc -s qdisc show dev $d | tr '\n' ' ')" >>"$after"
    done
  done
  python3 - "$out" "$(rate_gbs "$RATE")" "$before" "$after" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))["data"]; rate = float(sys.argv[2])
def tc(path):
    out = {}
    for line in open(path):
        node, dev, rest = line.split(" ", 2)
        m = re.search(r"qdisc (\S+) .*?rate (\S+).*?Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)", rest)
        out[(node, dev)] = m and (m[1], m[2], int(m[3]), int(m[5]), int(m[6]))
    return out
b, a = tc(sys.argv[3]), tc(sys.argv[4])
for k in sorted(a):
    if not a[k] or a[k][0] != "tbf":
        sys.exit(f"tc: {k} has no tbf: {a[k]}")
    sent, drop, over = (a[k][2] - b[k][2], a[k][3] - b[k][3], a[k][4] - b[k][4])
    print(f"  tc {k[0]} {k[1]}: tbf rate {a[k][1]}: sent {sent} B, dropped {drop}, overlimits {over}")
    if sent <= 0 or over <= 0:
        sys.exit(f"tc: the shaper on {k} did not shape this run (sent {sent}, overlimits {over}): figures refused")
assert not d["verdicts"], d["verdicts"]
print(f"{'rail':>4} {'size':>12} {'busbw GB/s':>11} {'% of rate':>9} {'in place':>9} {'wrong':>6}")
for r in d["rails"]:
    assert r["error"] is None, r
    for x in r["results"]:
        print(f"{r['rail']:>4} {x['size_bytes']:>12} {x['busbw_gbs']:>11.4f} {100*x['busbw_gbs']/rate:>8.1f}% {100*x['in_place']['busbw_gbs']/rate:>8.1f}% {x['wrong']:>6}")
for x in d["results"]:
    print(f"node {x['size_bytes']:>12} {x['busbw_gbs']:>11.4f} {100*x['busbw_gbs']/rate/len(d['rails']):>8.1f}% of the rails' sum")
PY
}

bench_mpi() {
  command -v mpicc >/dev/null || { echo "mpi: SKIPPED (install openmpi-bin libopenmpi-dev)"; return; }
  echo "== Open MPI MPI_Allreduce (btl tcp on eth1), same lab links =="
  mpicc -O2 -o "/tmp/$P-mpi" scripts/mpi_allreduce.c
  local hosts
  hosts=$(for i in $(seq 0 $((N - 1))); do printf "198.18.0.%d:1," $((10 + i)); done)
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 node 0 mpirun -np "$N" -H "${hosts%,}" \
    --mca plm_rsh_agent "$PWD/scripts/lab-rsh" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self --mca btl_tcp_if_include eth1 --mca oob_tcp_if_include eth0 \
    -x LAB_PREFIX "/tmp/$P-mpi" "$MINB" "$MAXB" "$ITERS" 1 | tee "/tmp/$P-mpi.txt"
  python3 - "/tmp/$P-fabprobe.json" "/tmp/$P-mpi.txt" <<'PY'
import json, sys, os
if not os.path.exists(sys.argv[1]):
    sys.exit(0)
fp = {r["size_bytes"]: r["busbw_gbs"] for r in json.load(open(sys.argv[1]))["data"]["results"]}
print(f"{'size':>12} {'fabprobe':>9} {'MPI':>9} {'ratio':>6}")
for line in open(sys.argv[2]):
    b, _, _, bus = line.split()
    b, bus = int(b), float(bus)
    if b in fp:
        print(f"{b:>12} {fp[b]:>9.4f} {bus:>9.4f} {fp[b]/bus:>6.2f}")
PY
}

bench_local() {
  echo "== fabprobe ring --local 4, loopback, unshaped =="
  /usr/bin/time -f "wall %e s, user %U s, sys %S s, cpu %P" "$BIN" ring --local 4 -b "$MINB" -e "$MAXB" -n "$ITERS" \
    | grep -E '^ +[0-9]|Avg'
}

bench_bootstrap() {
  echo "== bootstrap of 32 local ranks =="
  for _ in 1 2 3; do
    /usr/bin/time -f "wall %e s" "$BIN" ring --local 32 -b 4 -e 4 -n 1 -w 0 --channels 1 --format json \
      | python3 -c "import json,sys; print('bootstrap_us', json.load(sys.stdin)['data']['bootstrap_us'])"
  done
}

case "$WHAT" in
  lab) lab_up; bench_lab ;;
  rails) lab_up; rail_up; bench_rails ;;
  mpi) lab_up; bench_mpi ;;
  local) bench_local ;;
  bootstrap) bench_bootstrap ;;
  all) lab_up; bench_lab; bench_mpi; cleanup; trap - EXIT; bench_local; bench_bootstrap ;;
  *) echo "usage: $0 [lab|rails|mpi|local|bootstrap|all]" >&2; exit 2 ;;
esac
