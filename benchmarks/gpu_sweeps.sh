#!/usr/bin/env bash
# The GPU checks of the batched trainers, in one run on a CUDA machine (about 9 minutes; each step has
# its own time limit, so one that runs long cannot take the others with it):
#   1. the CUDA tests of the batched trainers, CUDA graphs included;
#   2. agreement of GPU training with the CPU single run (benchmarks/gpu_agreement.py);
#   3. where a GPU epoch goes, eager against CUDA graphs (benchmarks/gpu_step_profile.py);
#   4. configuration-epochs per second of the batched trainers, each way of stepping side by side
#      (benchmarks/bench_sweep.py), and a paper FC program padded against cut by size
#      (benchmarks/bench_padding.py);
#   5. the forecast of `bnc-reproduce all --data letter --protocol paper --device cuda`, from probes
#      of the plan's own chunks on the GPU (--dry-run: nothing is trained beyond the probes);
#   6. with CLAIM_SECONDS set (default 0: skipped), usps CNNs with ReLU at the memory budget of 1-bit
#      naive Bayes (8,650 bits): the paper's grid for that point (conv layers 1..2 x weight bits 1..8 x
#      batch norm on/off x lr0 3e-2/3e-3/3e-4, 500 epochs) with the seeds CLAIM_SEEDS (default 0) on
#      one data split (split seed 0), selected on a 20 % validation split, for the paper's Sec. VI
#      claim that these beat every model at the largest budget. It runs into CLAIM_DIR (default
#      runs/cnn_budget1) and resumes what is there, so a second call finishes a cut-short first.
#   7. with FIG3_SECONDS set (default 0: skipped), Fig. 3 on letter at the paper protocol
#      (`bnc-reproduce fig3 --data letter --protocol paper --device cuda`, about 1.3 GPU hours by the
#      forecast), resumed in FIG3_DIR (default runs/fig3-letter-paper) for at most FIG3_SECONDS; it
#      stops with ^C (every finished chunk stays) and packs FIG3_DIR into $OUT/fig3-letter-paper.tar.
#      Calls on machines that start bare go on from that folder: unpack the tar under runs/ and
#      name FIG3_DIR in the device call's carry.
# STEPS (default "1 2 3 4 5 6 7") picks the steps; PROFILE=0 skips step 3; END_BY (epoch seconds) cuts
# step 6 short to end the script by then.
# Needs the datasets and the paper's structures folder (BNC_DEPLOY_DATA_DIR, BNC_DEPLOY_STRUCTURES_DIR);
# writes its results to $OUT (default ./gpu-out).
#
#     BNC_DEPLOY_DATA_DIR=... BNC_DEPLOY_STRUCTURES_DIR=... bash benchmarks/gpu_sweeps.sh
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
STEPS=" ${STEPS:-1 2 3 4 5 6 7} "
step() { echo "== $1 ($(date +%T))"; }
wanted() { [[ "$STEPS" == *" $1 "* ]]; }

step "environment"
$PY -c 'import torch, platform; print(platform.python_version(), torch.__version__, torch.cuda.get_device_name())' \
    | tee "$OUT/environment.txt"

if wanted 1; then
step "1. CUDA tests"
timeout 100 $PY -m pytest -q -p no:cacheprovider tests/test_cuda_graph.py tests/test_dnn_batched.py \
    tests/test_bnc_batched.py tests/test_structure_batched.py -k "cuda or gpu" 2>&1 | tail -8 | tee "$OUT/tests.txt"
fi

if wanted 2; then
step "2. GPU against the CPU single run"
timeout 90 $PY benchmarks/gpu_agreement.py --epochs 3 --kinds nb,tan,fc --json "$OUT/agreement.json" 2>&1 \
    | grep '^\['
fi

if wanted 3 && [ "${PROFILE:-1}" != 0 ]; then
    step "3. where an epoch goes"
    timeout 70 $PY benchmarks/gpu_step_profile.py --kinds tan:1024,fc:192 --gpu-steps eager,graphs \
        --json "$OUT/profile.json" 2>&1 | grep -v -e AccumulateGrad -e run_backward | tail -40
fi

if wanted 4; then
step "4. rates"
timeout 150 $PY benchmarks/bench_sweep.py --models nb,tan,fc,cnn --sizes 192,1024 --epochs 3 --timing steady \
    --devices cuda --gpu-steps eager,graphs --json "$OUT/bench_sweep_cuda.json" 2>&1 | grep -v -e AccumulateGrad -e run_backward | tail -24
    # A paper FC program (960 configurations) padded to its widest net against cut by size.
    timeout 150 $PY benchmarks/bench_padding.py --device cuda --seeds 5 --repeats 2 --json "$OUT/bench_padding_cuda.json" \
        2>&1 | grep -v -e AccumulateGrad -e run_backward | tail -5
fi

if wanted 5; then
step "5. forecast of the letter paper protocol"
timeout 170 $PY -m bnc_deploy.cli.reproduce all --data letter --protocol paper --device cuda --dry-run --estimate \
    -o /tmp/forecast --json > "$OUT/forecast.json" 2> "$OUT/forecast.err"
$PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["estimate"]["text"])' "$OUT/forecast.json" \
    || tail -5 "$OUT/forecast.err"
fi
CLAIM=${CLAIM_SECONDS:-0}
wanted 6 || CLAIM=0
if [ -n "${END_BY:-}" ]; then  # a wall-clock deadline (epoch seconds) for the whole script
    left=$(( END_BY - $(date +%s) - 15 ))
    [ "$left" -lt "$CLAIM" ] && CLAIM=$left
fi
if [ "$CLAIM" -gt 0 ]; then
    SEEDS=${CLAIM_SEEDS:-0}
    DIR=${CLAIM_DIR:-runs/cnn_budget1}
    step "6. usps CNN ReLU at the 1-bit NB budget, seeds $SEEDS, 500 epochs ($CLAIM s at most)"
    # One chunk per program (conv layers x batch norm: 24 configurations per seed), so every
    # finished program is committed even if the step runs out of time; --resume goes on from there.
    per_program=$(( 24 * $($PY -c 'import sys; from bnc_deploy.sweep.records import parse_values; print(len(parse_values(sys.argv[1], "seed")))' "$SEEDS") ))
    resume=(); [ -f "$DIR/results.sqlite" ] && resume=(--resume)
    timeout "$CLAIM" $PY -m bnc_deploy.cli.bnc_sweep --data usps --model cnn --match-bits 8650 --layers 1,2 \
        --weight-bits 1..8 --batch-norm true,false --lr 3e-2,3e-3,3e-4 --activation relu --epochs 500 \
        --seeds "$SEEDS" --split-seed 0 --validation 0.2 --device cuda --group-by model,layers,batch_norm \
        --max-configs "$per_program" --keep none --quiet --json -o "$DIR" "${resume[@]}" > "$OUT/cnn_budget1.json"
    cp "$DIR/results.sqlite" "$OUT/cnn_budget1.sqlite" 2>/dev/null
fi
FIG3=${FIG3_SECONDS:-0}
wanted 7 || FIG3=0
if [ -n "${END_BY:-}" ] && [ "$FIG3" -gt 0 ]; then
    left=$(( END_BY - $(date +%s) - 20 ))
    [ "$left" -lt "$FIG3" ] && FIG3=$left
fi
if [ "$FIG3" -gt 0 ]; then
    DIR=${FIG3_DIR:-runs/fig3-letter-paper}
    step "7. Fig. 3 on letter, paper protocol, resumed in $DIR ($FIG3 s at most)"
    timeout -s INT -k 30 "$FIG3" $PY -m bnc_deploy.cli.reproduce fig3 --data letter --protocol paper --device cuda \
        -o "$DIR" 2>&1 | grep -v -e AccumulateGrad -e run_backward | tr '\r' '\n' | grep -v '%|' | tail -20
    [ -d "$DIR" ] && tar -C "$(dirname "$DIR")" -cf "$OUT/fig3-letter-paper.tar" "$(basename "$DIR")"
fi
step "done"
