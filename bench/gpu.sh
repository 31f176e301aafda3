#!/usr/bin/env bash
# The GPU benchmark in one call (not a test), for a CUDA machine without package
# access, within a device call's 10 minutes: every step has its own time limit,
# cut to what is left of DEADLINE (570 s from the start), and a step with under
# 15 s left is skipped. Its results in one tarball, written again after every
# step, so a call that is cut off still brings back what its finished steps
# measured.
#
#   PYTHONPATH=.venv/extras ../shared/tools/gpu-bundle  # here, after `make install`
#       (.venv/extras holds spacy-transformers, which the bundle pins from the venv)
#   PY=.venv/bin/python PREPARE=1 bash bench/gpu.sh  # here: the corpus into .gpu/corpus
#   bash bench/gpu.sh                              # there, from the project's root
#
# Limits come from the runs on an H200 (16 cores): staging 10-20 s; training
# both heads for 30 steps 107-140 s even with the corpus converted beforehand (each
# `spacy train`, `assemble` and the shared pipeline load and save the encoder);
# each bench/speed.py system is a fresh process whose imports, CUDA start and
# pipeline load cost tens of seconds before its timed work; `bert-pipes annotate`
# with 1 and auto workers took 76 s over the 2,067 news paragraphs and 72 s over
# the 3,080 queries.
#
# Steps, in the order of what the acceptance needs most:
#   1. `bash .gpu/stage.sh` (packages, entry points, the encoder's files with
#      same-shaped random weights: timings only), when .gpu/ is there;
#   2. trained heads (bench/trained.py, 30 steps each, no test scores: what users
#      run, not accurate with random encoder weights);
#   3. `bert-pipes annotate` with 1 worker and `auto` over all news paragraphs,
#      OUTPUT's bytes compared (bench/annotate_workers.py);
#   4. bench/speed.py on news paragraphs (NEWS_LIMIT, 1,500), fp32: bare-device,
#      ours-device (our own forward over batches on the device), ours textcat+ner;
#   5. bf16 in batches 8x larger (131,072 padded wordpieces, 4,096 texts):
#      bare-device, ours-device (bf16 at 16,384 was launch-bound on an H200:
#      addmm spent 12x more CPU than GPU time);
#   6. annotate, 1 worker and auto, over all Banking77 test queries;
#   7. bench/speed.py on the queries, fp32, as step 4;
#   8. `make gpu`'s tests (pytest -m gpu, 73-85 s on an H200);
#   9. torch.profiler over our forward, fp32 and bf16 (bench/forward_profile.py),
#      with what is left.
# Writes $OUT/gpu_results.tar.gz (everything under $OUT/gpu, logs included).
# LIMIT=N takes each workload's first N texts (0: all; news defaults to
# NEWS_LIMIT), GPU=-1 runs on the CPU, ONLY="step names" runs only those steps;
# TRAINED=DIR uses bench/trained.py's pipelines in DIR instead of training:
# `GPU=-1 LIMIT=20 TRAINED=/tmp/trained bash bench/gpu.sh` checks the script itself.
# ANNOTATE_REPEAT=N repeats each annotate workload N times (default 1): 2,067
# paragraphs make 3 chunks, too few for 8 workers to pay for their start. A
# follow-up call while the machine is warm (its files are still there):
#   ONLY="stage annotate_news" ANNOTATE_REPEAT=10 TRAINED=/tmp/gpu_bench/trained \
#       DEADLINE=220 bash bench/gpu.sh
set -u
PY=${PY:-python3}
if [ "${PREPARE:-0}" = 1 ]; then  # here, after gpu-bundle: the corpus into .gpu/corpus
    rm -rf .gpu/corpus /tmp/gpu_corpus
    "$PY" bench/trained.py --out /tmp/gpu_corpus --corpus-only && mv /tmp/gpu_corpus/corpus .gpu/
    exit
fi
GPU=${GPU:-0}
OUT=${OUT:-bench/results}
WORK=${WORK:-/tmp/gpu_bench}
LIMIT=${LIMIT:-0}
NEWS_LIMIT=$([ "$LIMIT" = 0 ] && echo "${NEWS_LIMIT:-1500}" || echo "$LIMIT")
PROFILE_LIMIT=$([ "$LIMIT" = 0 ] && echo 500 || echo "$LIMIT")
TRAINED=${TRAINED:-}
DEADLINE=${DEADLINE:-570}
ONLY=${ONLY:-}
RESULTS=$OUT/gpu
mkdir -p "$RESULTS" "$WORK"
START=$(date +%s)
log() { echo "[$(( $(date +%s) - START )) s] $*" | tee -a "$RESULTS/steps.log"; }
step() {  # NAME SECONDS COMMAND...: run with a limit, output to NAME.log
    local name=$1 limit=$2
    shift 2
    if [ -n "$ONLY" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
    local left=$(( DEADLINE - ($(date +%s) - START) ))
    if [ "$left" -lt 15 ]; then log "skip $name: ${left} s left"; return; fi
    [ "$limit" -gt "$left" ] && limit=$left
    log "start $name (limit ${limit} s)"
    timeout "$limit" "$@" >"$RESULTS/$name.log" 2>&1
    log "end $name: exit $?"
    tar -czf "$OUT/gpu_results.tar.gz" -C "$OUT" gpu
}

[ -f .gpu/stage.sh ] && step stage 30 bash .gpu/stage.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$RESULTS/gpu.csv" 2>&1
if [ -z "$TRAINED" ]; then
    TRAINED=$WORK/trained
    [ -d .gpu/corpus ] && mkdir -p "$TRAINED" && cp -r .gpu/corpus "$TRAINED/"
    step trained 150 "$PY" bench/trained.py --out "$TRAINED" --textcat-steps 30 \
        --ner-steps 30 --precisions ""
fi
PIPELINE=$TRAINED/textcat-ner
SPEED=(--no-train --gpu "$GPU" --threads 0 --max-batch-tokens 16384 --batch-size 256
       --trained "$TRAINED")
annotate() {  # WORKLOAD SECONDS (times ANNOTATE_REPEAT)
    local repeat=${ANNOTATE_REPEAT:-1}
    step "annotate_$1" "$(( $2 * repeat ))" "$PY" bench/annotate_workers.py "$PIPELINE" \
        --workload "$1" --repeat "$repeat" --limit "$LIMIT" --workers 1,auto \
        --gpu-id "$GPU" --work "$WORK/annotate" --output "$RESULTS/annotate_workers_$1.json"
}
speed() {  # WORKLOAD PRECISION TEXTS SECONDS SYSTEMS
    step "speed_$1_$2" "$4" "$PY" bench/speed.py --workload "$1" --precision "$2" \
        --limit "$3" "${SPEED[@]}" --systems "$5" --output "$RESULTS/speed_$1_$2.json"
}
annotate news 100
speed news fp32 "$NEWS_LIMIT" 120 bare-device,ours-device,ours-textcat-ner
step speed_news_bf16_big 70 "$PY" bench/speed.py --workload news --precision bf16 \
    --limit "$NEWS_LIMIT" "${SPEED[@]}" --max-batch-tokens 131072 --batch-size 4096 \
    --systems bare-device,ours-device --output "$RESULTS/speed_news_bf16_big.json"
annotate short 90
speed short fp32 "$LIMIT" 100 bare-device,ours-device,ours-textcat-ner
cp "$TRAINED/trained.json" "$RESULTS/" 2>/dev/null
step gpu_tests 100 "$PY" -m pytest -q -ra -m gpu -p no:cacheprovider
step profile 25 "$PY" bench/forward_profile.py --gpu "$GPU" --precisions fp32,bf16 \
    --limit "$PROFILE_LIMIT" --output "$RESULTS"
log "done"
tar -czf "$OUT/gpu_results.tar.gz" -C "$OUT" gpu
