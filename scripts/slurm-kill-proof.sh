#!/usr/bin/env bash
# Issue 45's proof under a real Slurm (not run in CI; CI runs 4+3): `srun -N4 fabprobe ring
# -b 64M -e 64M -n 200 --no-scan --timeout 5 --format json` with one task killed at a varying
# moment 1.5-4 s after srun started, KILLS runs with SIGKILL (tasks 1-3) and TERMS with SIGTERM
# (tasks 0-3), every second run with `--output FILE`: rank 0's JSON must parse every time and
# name what happened (tests/lab_slurm.rs ring_report_is_whole_whenever_a_task_dies).
# Needs root, slurm-wlm and munge (.ci/run installs them); the lab builds and
# tears down its own slurmctld, slurmds and namespaces.
#
#   scripts/slurm-kill-proof.sh [KILLS] [TERMS]     (default 40 20: 20+10 to stdout, 20+10 to a file)
#
# Prints each run's line and a count per signal x destination x verdict; exit status is the
# test's.
set -uo pipefail
cd "$(dirname "$0")/.."
kills=${1:-40}
terms=${2:-20}
log=$(mktemp /tmp/slurm-kill-proof.XXXXXX.log)
FABPROBE_LAB=required FABPROBE_SLURM_KILLS="$kills,$terms" \
  cargo test --release --locked --test lab_slurm ring_report_is_whole_whenever_a_task_dies \
  -- --nocapture --test-threads=1 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo
echo "runs (signal, --output, rank 0's first verdict):"
grep -o '^.*run [0-9]*: SIG[A-Z]* to task [0-9] at [0-9.]* s (--output: [a-z]*): [0-9]* bytes, verdict [a-z_]*' "$log" |
  sed -E 's/.*(SIG[A-Z]+) to task .*--output: ([a-z]+)\): [0-9]+ bytes, verdict ([a-z_]+)/\1 output-file=\2 verdict=\3/' |
  sort | uniq -c
echo "failed runs: $(grep -c '^run [0-9]*: .*rank 0.s JSON\|panicked' "$log")  (log: $log)"
exit "$rc"
