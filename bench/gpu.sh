#!/usr/bin/env bash
# The GPU benchmark in one call (not a test), for a CUDA machine without package
# access, within a device call's 10 minutes: every step has its own time limit,
# and the GPU tests, last, get what is left of DEADLINE (570 s from the start).
# Its results in one tarball, written again after every step, so a call that is
# cut off still brings back what its finished steps measured.
#
#   ../shared/tools/gpu-bundle                     # here, after `make install`
#   bash bench/gpu.sh                              # there, from the project's root
#
# Steps, each under its own time limit (a step that runs out is cut off, its log
# kept, and the next one runs):
#   1. `bash .gpu/stage.sh` (packages, entry points, the encoder's files with
#      same-shaped random weights: timings only), when .gpu/ is there;
#   2. trained heads (bench/trained.py, 30 steps each, fp32: what users run, not
#      accurate with random encoder weights);
#   3. bench/speed.py on news paragraphs and Banking77 queries, fp32 and bf16:
#      bare, bare-device, ours-device (our own forward over batches on the
#      device), ours textcat+ner, and spacy-transformers (fp32);
#   4. `bert-pipes annotate` with workers 1, 2, 4 and 8 over the news paragraphs
#      repeated 3 times and the queries twice, fp32, OUTPUT's bytes
#      compared (bench/annotate_workers.py);
#   5. torch.profiler over our forward, fp32 and bf16 (bench/forward_profile.py);
#   6. `make gpu`'s tests (pytest -m gpu): 67 s on an H100 and 75 s on an H200
#      before, over the 60 s this step once had; now the time left to DEADLINE.
# Writes $OUT/gpu_results.tar.gz (everything under $OUT/gpu, logs included).
# LIMIT=N takes each workload's first N texts (0: all), and GPU=-1 runs on the
# CPU; TRAINED=DIR uses bench/trained.py's pipelines in DIR instead of training:
# `GPU=-1 LIMIT=20 TRAINED=/tmp/trained bash bench/gpu.sh` checks the script itself.
set -u
PY=${PY:-python3}
GPU=${GPU:-0}
OUT=${OUT:-bench/results}
WORK=${WORK:-/tmp/gpu_bench}
LIMIT=${LIMIT:-0}
PROFILE_LIMIT=$([ "$LIMIT" = 0 ] && echo 500 || echo "$LIMIT")
TRAINED=${TRAINED:-}
DEADLINE=${DEADLINE:-570}
RESULTS=$OUT/gpu
mkdir -p "$RESULTS" "$WORK"
START=$(date +%s)
log() { echo "[$(( $(date +%s) - START )) s] $*" | tee -a "$RESULTS/steps.log"; }
step() {  # NAME SECONDS COMMAND...: run with a limit, output to NAME.log
    local name=$1 limit=$2
    shift 2
    log "start $name (limit ${limit} s)"
    timeout "$limit" "$@" >"$RESULTS/$name.log" 2>&1
    log "end $name: exit $?"
    tar -czf "$OUT/gpu_results.tar.gz" -C "$OUT" gpu
}

[ -f .gpu/stage.sh ] && step stage 30 bash .gpu/stage.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$RESULTS/gpu.csv" 2>&1
if [ -z "$TRAINED" ]; then
    TRAINED=$WORK/trained
    step trained 60 "$PY" bench/trained.py --out "$TRAINED" --textcat-steps 30 \
        --ner-steps 30 --precisions fp32
fi
SPEED=(--gpu "$GPU" --threads 0 --max-batch-tokens 16384 --batch-size 256 --limit "$LIMIT"
       --trained "$TRAINED")
declare -A FP32_LIMIT=([news]=90 [short]=60) BF16_LIMIT=([news]=40 [short]=35)
for workload in news short; do
    step "speed_${workload}_fp32" "${FP32_LIMIT[$workload]}" "$PY" bench/speed.py --workload "$workload" \
        --precision fp32 "${SPEED[@]}" \
        --systems bare,bare-device,ours-device,ours-textcat-ner,trf-textcat-ner \
        --output "$RESULTS/speed_${workload}_fp32.json"
    step "speed_${workload}_bf16" "${BF16_LIMIT[$workload]}" "$PY" bench/speed.py --workload "$workload" \
        --precision bf16 "${SPEED[@]}" --systems bare-device,ours-device,ours-textcat-ner \
        --output "$RESULTS/speed_${workload}_bf16.json"
done
PIPELINE=$TRAINED/textcat-ner
step annotate_news 80 "$PY" bench/annotate_workers.py "$PIPELINE" --workload news \
    --repeat 3 --limit "$LIMIT" --workers 1,2,4,8 --gpu-id "$GPU" --work "$WORK/annotate" \
    --output "$RESULTS/annotate_workers_news.json"
step annotate_short 40 "$PY" bench/annotate_workers.py "$PIPELINE" --workload short \
    --repeat 2 --limit "$LIMIT" --workers 1,2,4,8 --gpu-id "$GPU" --work "$WORK/annotate" \
    --output "$RESULTS/annotate_workers_short.json"
step profile 25 "$PY" bench/forward_profile.py --gpu "$GPU" --precisions fp32,bf16 \
    --limit "$PROFILE_LIMIT" --output "$RESULTS"
cp "$TRAINED/trained.json" "$RESULTS/" 2>/dev/null
LEFT=$(( DEADLINE - ($(date +%s) - START) ))
step gpu_tests "$(( LEFT > 30 ? LEFT : 30 ))" "$PY" -m pytest -q -ra -m gpu -p no:cacheprovider
log "done"
tar -czf "$OUT/gpu_results.tar.gz" -C "$OUT" gpu
