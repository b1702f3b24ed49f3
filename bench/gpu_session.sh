#!/usr/bin/env bash
# Issues 30 and 32's GPU measurements, in order of what is missing, each part under a time limit,
# for one lent GPU machine (../shared/gpu/README.md: 15 device minutes, starts included). From the
# checkout's root, with the wheels the machine lacks in .whl (carried):
#
#     bash bench/gpu_session.sh                # parts a-e: about 8 minutes on an H200 (estimated)
#     PARTS=g BUDGET=240 bash bench/gpu_session.sh    # then the fast tier, in the time left
#     PARTS=abcd IMAGES=2 BATCH=2 BATCHES=2 bash bench/gpu_session.sh   # a dry run on a CPU
#
# a. attention (issue 32, item 1): ViT's and Swin's, XLA's against cuDNN's padded fused kernel,
#    and a Swin-T train step at half the batch in bfloat16 (its attention has a bias)
# b. ResNet-50's step at batch 256, 384 and 512 (item 3)
# c. where ViT-S/16's and ResNet-50's steps spend their time: jax.profiler, by kind (item 2)
# d. ViT-S/16's step under XLA flags worth an A/B (item 2)
# e. train.py's start-up and loop against its step (issue 30, items 1-2): gpu_feed.sh's part 1
# f. the GPU table beside PyTorch's, ResNet-20 only (item 4; the other rows take minutes)
# g. the fast tier of the tests on the GPU (item 5), stopped at its time limit with a summary
# h. what remat=True saves on the GPU: ViT-B/16 and ResNet-50, memory and step time (not asked
#    by an issue; PARTS=h, when time is left)
#
# Everything also goes to $OUT (the device tool's folder that comes back), one log a part.
set -uo pipefail
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.6}
PARTS=${PARTS:-abcde} IMAGES=${IMAGES:-256} BATCH=${BATCH:-256} BATCHES=${BATCHES:-256 384 512}
OUT=${OUT:-/tmp/gpu_session} BUDGET=${BUDGET:-540}  # seconds for the whole script: under the
# device tool's 600 s a command, so that it ends with its logs whatever a part takes
mkdir -p "$OUT"
if ! python3 -c 'import grain, tensorboardX' 2>/dev/null; then  # the GPU machine's python
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=$PWD:$PWD/bench:/tmp/site${PYTHONPATH:+:$PYTHONPATH}

part() {  # part LETTER SECONDS TITLE COMMAND: runs COMMAND (bash) if asked, within SECONDS and
    # what is left of BUDGET
    local letter=$1 seconds=$2 title=$3 command=$4 left=$((BUDGET - SECONDS))
    [[ $PARTS == *$letter* ]] || return 0
    if ((left < 30)); then
        echo "== $letter. $title: skipped, ${left} s of the budget left" && return 0
    fi
    seconds=$((seconds < left ? seconds : left))
    echo "== $letter. $title (at most $seconds s)"
    local start=$SECONDS
    timeout -s INT -k 10 "$seconds" bash -c "$command" 2>&1 | tee "$OUT/$letter.log" |
        grep -v -e 'step/s' -e 's/step'
    echo "   ($letter took $((SECONDS - start)) s, exit status ${PIPESTATUS[0]})"
}

ours() {  # ours NETWORK BATCH: gpu_table.py's figure for our step alone, as one JSON line
    python3 bench/gpu_table.py --measure ours --rows "$1" --batch "$2" --size 224 2>&1 |
        grep -E "^RESULT|Error" | tail -1
}
resnet50_batches() { for b in $BATCHES; do echo "batch $b: $(ours resnet50 $b)"; done; }
vit_flags() {
    for flags in "" --xla_gpu_enable_cudnn_layer_norm=true --xla_gpu_enable_triton_gemm=false \
        --xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUDNN,CUSTOM_CALL; do
        echo "XLA_FLAGS='$flags': $(XLA_FLAGS=$flags ours vit_small_patch16_224 $BATCH)"
    done
}
attention() {  # the layer alone, then a whole Swin-T step: does it compile with the kernel?
    python3 bench/attention_speed.py --images "$IMAGES"
    python3 bench/train_step.py swin_tiny_patch4_window7_224 --batch $((BATCH / 2)) \
        --dtype bfloat16 --steps 10
}
profiles() {
    python3 bench/step_profile.py vit_small_patch16_224 --batch $BATCH --dtype bfloat16
    python3 bench/step_profile.py resnet50 --batch $BATCH --dtype bfloat16 --top 15
}

export -f ours resnet50_batches vit_flags attention profiles
export BATCH BATCHES IMAGES
echo "== $(nproc) CPUs; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
python3 -c 'import jax, flax; print("jax", jax.__version__, "flax", flax.__version__, jax.devices())'
part a 100 "attention: XLA's against cuDNN's, and Swin-T's step" attention
part b 120 "ResNet-50 at batch $BATCHES" resnet50_batches
part c 100 "profiles of the steps" profiles
part d 130 "ViT-S/16 under XLA flags" vit_flags
part e 180 "train.py: start-up, loop against step" "PARTS=1 bash bench/gpu_feed.sh"
part f 150 "the GPU table, ResNet-20" "python3 bench/gpu_table.py --rows resnet20"
part g 270 "the fast tier on the GPU" \
    "JAX_PLATFORMS=cuda python3 -m pytest -m 'not slow' -n 8 -q -p no:cacheprovider -rfEs"
part h 150 "remat's memory and time on the GPU" \
    "python3 bench/remat_memory.py vit_base_patch16_224 resnet50 --batch $BATCH --dtype bfloat16 --time 10"
