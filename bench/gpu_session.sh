#!/usr/bin/env bash
# Issues 30 and 32's GPU measurements, each part under a time limit, for one lent GPU machine
# (../shared/gpu/README.md: 15 device minutes, starts included). From the checkout's root, with
# the wheels the machine lacks in .whl (carried):
#
#     bash bench/gpu_session.sh                 # what is still missing: parts s, t, p
#     PARTS=ce BUDGET=300 bash bench/gpu_session.sh    # then the compile's A/Bs, attention
#     PARTS=hmk BUDGET=300 bash bench/gpu_session.sh   # then remat, out of memory, distillation
#     PARTS=stp IMAGES=2 BATCH=2 BATCHES=2 bash bench/gpu_session.sh   # a dry run on a CPU
#
# a. the steps with their compile times: ViT-S/16's at BATCH, ResNet-50's at BATCHES (measured on
#    2026-11-27: 9,713 img/s, and 6,895 / 7,218 / 7,399 at 256 / 384 / 512)
# s. image stems (ResNet-50's, ViT-S/16's, ConvNeXt's, EfficientNet's) with their 3 input
#    channels padded to 4 and 8, alone and in ResNet-50's and ViT-S/16's steps (issue 32, item 3:
#    XLA pads a stem's channels for cuDNN in float16 only, not bfloat16)
# t. the GPU table's ViT-S/16 row, ours beside PyTorch eager and torch.compile on one machine
#    (issue 32, item 2: ours 9,713 img/s on 2026-11-27 against torch.compile's 9,034 measured on
#    another H200 the day before)
# b. train.py's start-up and loop against its step from a cold cache (issue 30, items 1-2):
#    gpu_feed.sh's part 1 (measured on 2026-11-27)
# c. compile time against step time (issue 30, item 2): ResNet-50 with XLA's autotuning off (a
#    compile with the autotuner's results cached took 9 s on 2026-11-27, a cold one 86-143 s),
#    ViT-S/16 with XLA's attention and cuDNN's (cuDNN's LayerNorm, measured on 2026-11-27:
#    8,700 img/s against 8,658, no gain)
# d. where ResNet-50's and ViT-S/16's steps spend their time: jax.profiler, by kind, the costliest
#    operations with the JAX operations they compute (measured on 2026-11-27)
# i. the layers without a matrix product alone (max pooling, BatchNorm, GELU), two or more ways
#    each (measured on 2026-11-27)
# e. attention, XLA's against 'auto' (item 1): ViT's padded fused kernel, Swin's windows with a
#    bias (XLA's under 'auto' since 2026-11-27's figures)
# f. the GPU table beside PyTorch's, ResNet-20 only (item 4; the other rows take minutes)
# g. the fast tier of the tests on the GPU (item 5; run on 2026-11-27: 146 s), stopped at its
#    time limit with a summary
# h. what remat saves on the GPU: ViT-B/16 and ResNet-50, memory and step time, each block
#    recomputed whole and with its products' outputs kept (its two policies; not asked by an
#    issue)
# m. train.py out of GPU memory (ResNet-50 at batch 8192): the one line that says what needs less,
#    with the device's name and limit (measured on CPUs only; not asked by an issue)
# k. what distillation costs a step: DeiT-S distilled with RegNetY-16GF as its teacher (DeiT's
#    recipe, configs/imagenet_deit_small_distilled.yaml), against the same step untaught (not asked
#    by an issue)
# p. load_pretrained's tests of the slow tier on the GPU (item 5: does parity hold there at full
#    precision?), stopped at its time limit with a summary
#
# Compiling on the H200s lent on 2026-11-27 took far longer than the 13-14 s seen on 2026-11-26
# (XLA's autotuner warning `Delay kernel timed out` throughout): ResNet-50's train step 85-102 s,
# ViT-S/16's 56-60 s; the parts' limits allow for it. Parts a, d-f and h share a compilation
# cache (and XLA's autotuning results) in CACHE; parts b and c compile cold (b as a user's first
# run does).
#
# Everything also goes to $OUT (the device tool's folder that comes back), one log a part.
set -uo pipefail
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.6}
PARTS=${PARTS:-stp} IMAGES=${IMAGES:-256} BATCH=${BATCH:-256} BATCHES=${BATCHES:-384 512}
OUT=${OUT:-/tmp/gpu_session} BUDGET=${BUDGET:-540}  # seconds for the whole script: under the
# device tool's 600 s a command, so that it ends with its logs whatever a part takes
CACHE=${CACHE:-/tmp/gpu_session_cache}
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
        grep --line-buffered -v -e 'step/s' -e 's/step'
    echo "   ($letter took $((SECONDS - start)) s, exit status ${PIPESTATUS[0]})"
}

ours() {  # ours NETWORK BATCH: gpu_table.py's figure for our step alone, as one JSON line
    python3 bench/gpu_table.py --measure ours --rows "$1" --batch "$2" --size 224 2>&1 |
        grep -E "^RESULT|Error" | tail -1
}
steps() {  # ViT-S/16's step first (GELU, patch embedding: new since its figure), then ResNet-50's
    echo "vit_small_patch16_224, batch $BATCH: $(ours vit_small_patch16_224 $BATCH)"
    for b in $BATCHES; do echo "resnet50, batch $b: $(ours resnet50 $b)"; done
}
xla_flags() {  # each line: the flags, then our step's img/s and compile seconds
    local flags attention
    for flags in --xla_gpu_autotune_level=0; do  # is the compile's minute and a half autotuning?
        echo "resnet50, XLA_FLAGS='$flags': $(XLA_FLAGS=$flags ours resnet50 $BATCH)"
    done
    for attention in xla auto; do  # does cuDNN's attention cost the compile's minute?
        echo "vit_small_patch16_224, attention=$attention:"
        python3 bench/train_step.py vit_small_patch16_224 --batch $BATCH --dtype bfloat16 \
            --attention $attention --steps 10 2>&1 | grep -E "compile|Error"
    done
}
cached() {  # cached COMMAND...: with the session's compilation cache
    JAX_COMPILATION_CACHE_DIR=$CACHE JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 "$@"
}
profiles() {  # each network's profile; the trace stays in a temporary folder
    for name in resnet50 vit_small_patch16_224; do
        cached python3 bench/step_profile.py $name --batch $BATCH --dtype bfloat16 --top 20
    done
}

export -f ours steps xla_flags cached profiles
export BATCH BATCHES IMAGES CACHE
echo "== $(nproc) CPUs; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
python3 -c 'import jax, flax; print("jax", jax.__version__, "flax", flax.__version__, jax.devices())'
part a $((130 * (1 + $(wc -w <<<"$BATCHES")))) "ViT-S/16's step, ResNet-50's at $BATCHES" "cached steps"
part s 300 "image stems with 3, 4 and 8 channels, alone and in steps" \
    "cached python3 bench/stem_channels.py --batch $BATCH"
part t 200 "the GPU table's ViT-S/16 row: ours, PyTorch eager, torch.compile, one machine" \
    "cached python3 bench/gpu_table.py --rows vit_small_patch16_224"
part d 240 "the profiles of ResNet-50's and ViT-S/16's steps" profiles
part i 60 "max pooling, BatchNorm and GELU alone" "python3 bench/elementwise_layers.py --images $BATCH"
part b 200 "train.py: start-up, loop against step" "PARTS=1 bash bench/gpu_feed.sh"
part c 200 "compiles: autotuning, attention" xla_flags  # cold: no cache
part p 270 "load_pretrained's slow tests on the GPU" \
    "XLA_PYTHON_CLIENT_MEM_FRACTION=0.1 JAX_PLATFORMS=cuda python3 -m pytest -m slow -n 8 -q \
     -p no:cacheprovider -rfEs tests/test_pretrained*.py"
part e 60 "attention: XLA's against 'auto'" "cached python3 bench/attention_speed.py --images $IMAGES"
part f 150 "the GPU table, ResNet-20" "cached python3 bench/gpu_table.py --rows resnet20"
part g 270 "the fast tier on the GPU" \
    "XLA_PYTHON_CLIENT_MEM_FRACTION=0.1 JAX_PLATFORMS=cuda python3 -m pytest -m 'not slow' -n 8 -q \
     -p no:cacheprovider -rfEs"
part m 120 "train.py out of memory" \
    "python3 train.py --config=configs/synthetic_resnet50.yaml --set data.batch_size=8192 \
     --set data.synthetic_examples=8192 --set train.steps=2 --workdir=/tmp/gpu_session_oom 2>&1 | tail -2"
part h 150 "remat's memory and time on the GPU" \
    "cached python3 bench/remat_memory.py vit_base_patch16_224 resnet50 --batch $BATCH --dtype bfloat16 \
     --remat true dots_saveable dots_with_no_batch_dims_saveable --time 10"
part k 180 "distillation's cost: DeiT-S taught by RegNetY-16GF, DeiT's recipe" \
    "cached python3 bench/train_step.py deit_small_distilled_patch16_224 --batch $BATCH \
     --dtype bfloat16 --teacher regnet_y_16gf --steps 10"
