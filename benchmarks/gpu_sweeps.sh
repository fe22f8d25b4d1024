#!/usr/bin/env bash
# The GPU checks of the batched trainers, in one run on a CUDA machine (at most about 12 minutes; each step has
# its own time limit, the last one $CLAIM_SECONDS, default 330):
#   1. the CUDA tests of the batched trainers;
#   2. agreement of GPU training with the CPU single run (benchmarks/gpu_agreement.py);
#   3. configuration-epochs per second of every batched trainer on the GPU (benchmarks/bench_sweep.py);
#   4. the forecast of `bnc-reproduce all --data letter --protocol paper --device cuda`, from probes on the GPU;
#   5. usps CNNs with ReLU at the memory budget of 1-bit naive Bayes (8,650 bits), the paper's grid for
#      that point (conv layers 1..2 x weight bits 1..8 x batch norm on/off x lr0 3e-2/3e-3/3e-4, 500
#      epochs) with one seed, selected on a 20 % validation split: the paper's Sec. VI claim that these
#      beat every model at the largest budget.
# Needs the datasets and the paper's structures folder (BNC_DEPLOY_DATA_DIR, BNC_DEPLOY_STRUCTURES_DIR);
# writes its results to $OUT (default ./gpu-out). Each step has its own time limit, so one that runs
# long cannot take the others with it.
#
#     BNC_DEPLOY_DATA_DIR=... BNC_DEPLOY_STRUCTURES_DIR=... bash benchmarks/gpu_sweeps.sh
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
step() { echo "== $1 ($(date +%T))"; }

step "environment"
$PY -c 'import torch, platform; print(platform.python_version(), torch.__version__, torch.cuda.get_device_name())' \
    | tee "$OUT/environment.txt"

step "1. CUDA tests"
timeout 60 $PY -m pytest -q -p no:cacheprovider tests/test_dnn_batched.py tests/test_structure_batched.py -k cuda \
    2>&1 | tail -5 | tee "$OUT/tests.txt"

step "2. GPU against the CPU single run"
timeout 75 $PY benchmarks/gpu_agreement.py --epochs 10 --json "$OUT/agreement.json" 2>&1 | tail -8

step "3. rates"
timeout 110 $PY benchmarks/bench_sweep.py --models nb,tan,fc,cnn,structure --sizes 16,256,1024 --epochs 2 \
    --devices cuda --json "$OUT/bench_sweep_cuda.json" 2>&1 | tail -24

step "4. forecast of the letter paper protocol"
timeout 110 $PY -m bnc_deploy.cli.reproduce all --data letter --protocol paper --device cuda --estimate \
    -o /tmp/forecast --json > "$OUT/forecast.json" 2> "$OUT/forecast.err"
$PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["estimate"]["text"])' "$OUT/forecast.json" \
    || tail -5 "$OUT/forecast.err"

step "5. usps CNN ReLU at the 1-bit NB budget, 500 epochs"
# One chunk per program (conv layers x batch norm: 24 configurations each), so every finished
# program is committed even if the step runs out of time.
timeout ${CLAIM_SECONDS:-330} $PY -m bnc_deploy.cli.bnc_sweep --data usps --model cnn --match-bits 8650 --layers 1,2 \
    --weight-bits 1..8 --batch-norm true,false --lr 3e-2,3e-3,3e-4 --activation relu --epochs 500 \
    --validation 0.2 --device cuda --group-by model,layers,batch_norm --max-configs 24 --keep none \
    --quiet --json -o /tmp/cnn_budget1 > "$OUT/cnn_budget1.json"
cp /tmp/cnn_budget1/results.sqlite "$OUT/cnn_budget1.sqlite" 2>/dev/null
step "done"
