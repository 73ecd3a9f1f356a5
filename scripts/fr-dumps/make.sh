#!/usr/bin/env bash
# Make the flight-recorder test data (tests/data/flight-recorder/) with real PyTorch:
# the CPU-usable wheel from PyPI in a venv, Gloo, 4 ranks on 127.0.0.1 per scenario.
# Each scenario's directory gets pickle/ and json/ (one dump per rank), job.log (what the
# ranks printed) and analyzer.txt (PyTorch's own fr_trace analyzer on the pickles).
# Not run in CI: CI reads the committed dumps without torch.
#
#   scripts/fr-dumps/make.sh [OUT_DIR] [scenario ...]
# Needs python3 and about 4 GB of disk (torch's Linux wheel pulls the CUDA runtime wheels;
# they load without a GPU). VENV=path reuses a venv that has torch.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../tests/data/flight-recorder}
shift || true
venv=${VENV:-${TMPDIR:-/tmp}/fabprobe-fr-venv}
if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q torch
fi
py=$venv/bin/python
"$py" -c 'import torch; print(torch.__version__)' > "$out/TORCH_VERSION"
scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
    mapfile -t scenarios < <("$py" -c "import sys; sys.path.insert(0, '$here'); import scenarios; print('\n'.join(scenarios.SCENARIOS))")
fi
for s in "${scenarios[@]}"; do
    rm -rf "${out:?}/$s"
    mkdir -p "$out/$s"
    echo "scenario $s" >&2
    # Thread ids and timestamps differ run to run; the ranks' own messages are the log.
    "$py" "$here/scenarios.py" "$out" "$s" 2> "$out/$s/job.log" || true
    # PyTorch's analyzer reads a directory of pickles named <prefix><rank>.
    (cd "$out/$s" && "$py" -m torch.distributed.flight_recorder.fr_trace pickle -p nccl_trace_rank_ \
        > analyzer.txt 2>&1 || echo "(exit status $?)" >> analyzer.txt)
    (cd "$out/$s" && "$py" -m torch.distributed.flight_recorder.fr_trace json -p nccl_trace_rank_ \
        > analyzer-json.txt 2>&1 || echo "(exit status $?)" >> analyzer-json.txt)
done
