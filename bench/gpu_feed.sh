#!/usr/bin/env bash
# The figures of docs/performance.md's "Feeding a GPU", in one command (about 5 minutes on one
# H100/H200 with 16 CPU cores; run from the checkout's root):
#
#     bash bench/gpu_feed.sh            # ResNet-50, bfloat16, batch 256, 224 px
#     PARTS=12 bash bench/gpu_feed.sh   # parts 1 and 2 only
#     BATCH=64 SIZE=64 DTYPE=float32 STEPS=40 IMAGES=256 bash bench/gpu_feed.sh   # a CPU dry run
#
# 1. train.py's loop against its step alone on synthetic data (bench/loop_speed.py), from a cold
#    compilation cache: the loop's img/s, the step's, their ratio, and the start-up lines.
# 2. The JPEG pipeline with ResNet-50's training policy on ImageNet-sized photographs
#    (bench/photo_folder.py): CPU ms an image, and img/s with the default worker count.
# 3. train.py on those JPEGs: img/s and the part of the time spent waiting for data.
set -euo pipefail
export PYTHONUNBUFFERED=1
MODEL=${MODEL:-resnet50} BATCH=${BATCH:-256} SIZE=${SIZE:-224} DTYPE=${DTYPE:-bfloat16}
STEPS=${STEPS:-300} IMAGES=${IMAGES:-2048} PHOTOS=${PHOTOS:-/tmp/gpu_feed_photos} PARTS=${PARTS:-123}
run=(--set model.name="$MODEL" --set model.dtype="$DTYPE" --set data.batch_size="$BATCH")
quiet() {  # line by line, unbuffered: a part stopped at its time limit keeps its lines
    sed -u 's/\r/\n/g' | grep --line-buffered -v -e 'step/s' -e 's/step' -e '^ *$' || true
}

echo "== $(nproc) CPUs; $(python3 -c 'import jax; print(jax.devices()[0].device_kind, jax.__version__)')"
if [[ $PARTS == *1* ]]; then
echo "== 1. the loop against the step: synthetic data"
python3 bench/loop_speed.py "${run[@]}" --set data.image_size="$SIZE" \
    --set data.synthetic_examples=$((BATCH * 100)) --steps "$STEPS" --log-every $((STEPS / 6)) \
    2>&1 | quiet
fi

if [[ $PARTS == *2* || $PARTS == *3* ]]; then
echo "== 2. JPEGs: ResNet-50's training policy"
[ -d "$PHOTOS" ] || python3 bench/photo_folder.py "$PHOTOS" --images "$IMAGES"
jpegs=(--config configs/imagenet_resnet50.yaml --set data.dir="$PHOTOS" --set data.batch_size="$BATCH")
python3 bench/input_pipeline.py "${jpegs[@]}" --per-image 200
python3 bench/input_pipeline.py "${jpegs[@]}" --batches 30
fi

if [[ $PARTS == *3* ]]; then
echo "== 3. train.py on the JPEGs"
workdir="$(mktemp -d)/run"
python3 train.py --config=configs/imagenet_resnet50.yaml "${run[@]}" --set data.dir="$PHOTOS" \
    --set data.image_size="$SIZE" --set train.steps="$STEPS" --set train.log_every=$((STEPS / 6)) \
    --set train.eval_every=0 --set train.checkpoint_every=$((10 * STEPS)) \
    --workdir="$workdir" 2>&1 | quiet
grep img_per_sec "$workdir/metrics.jsonl"
fi
