#!/usr/bin/env bash
# Benchmarks for `fabprobe ring` (not run in CI). Needs root and iproute2; the Open MPI
# comparison needs `apt-get install openmpi-bin libopenmpi-dev`.
#
#   scripts/bench-ring.sh [lab|mpi|local|bootstrap|all]
#
#   lab        4 namespaces, data links shaped with tc tbf at $RATE (default 1gbit), fabprobe
#              busbw per size vs the shaped rate (target >= 92% at 64 MiB and above)
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
  mpi) lab_up; bench_mpi ;;
  local) bench_local ;;
  bootstrap) bench_bootstrap ;;
  all) lab_up; bench_lab; bench_mpi; cleanup; trap - EXIT; bench_local; bench_bootstrap ;;
  *) echo "usage: $0 [lab|mpi|local|bootstrap|all]" >&2; exit 2 ;;
esac
