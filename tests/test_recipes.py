"""Recipes that start from published weights run: the fine-tuning recipe
(configs/finetune_vit_small.yaml) from the ViT parity fixture (tests/fixtures/parity/
vit_small_config, timm's weights of a tiny ViT) onto a small image folder, with the recipe's
options on (random erasing aside) and gradient accumulation over two micro-batches; DeiT's
distillation recipe (configs/imagenet_deit_small_distilled.yaml) with a RegNetY parity fixture as
its teacher. (Every shipped config validates in tests/test_training_config.py; resuming between
micro-batches in tests/test_accumulation.py.)"""

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from safetensors.numpy import load_file

from nets_training import checkpoint, config, loop

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "parity" / "vit_small_config"
TINY_VIT = (
    "{drop_path_rate: 0.1, img_size: 32, patch_size: 8, embed_dim: 32, depth: 2, num_heads: 2}"
)


def image_folder(root: Path, labels=("cat", "dog")) -> Path:
    """A class of 40x40 RGB images for each label: 4 each to train on, 1 each to evaluate."""
    rng = np.random.default_rng(0)
    for split, count in (("train", 4), ("val", 1)):
        for label in labels:
            (root / split / label).mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 255, (40, 40, 3), np.uint8)
                Image.fromarray(pixels).save(root / split / label / f"{i}.png")
    return root


@pytest.mark.slow  # a run of the recipe, from a parity fixture: its train step compiles in ~5 s
def test_the_fine_tuning_recipe_runs_from_published_weights(tmp_path):
    overrides = [
        f"data.dir={image_folder(tmp_path / 'images')}",
        "model.name=vit_tiny_patch16_224",  # the fixture's architecture, at its tiny size
        f"model.kwargs={TINY_VIT}",
        f"finetune.init_from={FIXTURE}",
        "data.image_size=32",
        "data.batch_size=4",
        "optim.accumulate_steps=2",
        "train.steps=2",
        # Random erasing doubles the train step's compilation (~10 s on 2 cores); its own tests
        # are in tests/test_device_augment.py.
        "data.reprob=0",
    ]
    cfg = config.load("finetune_vit_small.yaml", overrides)
    assert (cfg.optim.layer_decay, cfg.finetune.exclude) == (0.65, ("head",))
    summary = loop.train(cfg, tmp_path / "run")
    assert summary.steps == 2 and summary.final_top1 is not None
    tuned = checkpoint.load_variables(tmp_path / "run")["params"]
    published = load_file(FIXTURE / "model.safetensors")
    assert tuned["head"]["kernel"].shape == (32, 2)  # new, for the folder's two classes
    kernel = tuned["blocks_0"]["attn"]["qkv"]["kernel"]
    difference = np.abs(kernel - published["blocks.0.attn.qkv.weight"].T.astype(np.float32))
    assert 0 < difference.max() < 1e-2  # fine-tuned from the weights, at a decayed rate


@pytest.mark.slow  # a run of the recipe, its student and teacher in one train step (~6 s)
def test_the_distillation_recipe_runs_with_published_weights_as_its_teacher(tmp_path):
    # The teacher: timm's weights of a small RegNetY with 10 classes (the DeiT recipe's is
    # regnety_160.deit_in1k); the student: a tiny DeiT with a distillation token, from scratch.
    teacher = ROOT / "tests" / "fixtures" / "parity" / "regnet_y"
    small_regnet = "{w0: 8, wa: 8.0, wm: 2.0, depth: 6, group_width: 8, stem_width: 8}"
    tiny_deit = "{img_size: 32, patch_size: 8, embed_dim: 32, depth: 2, num_heads: 2}"
    digits = [str(i) for i in range(10)]
    overrides = [
        f"data.dir={image_folder(tmp_path / 'images', digits)}",
        "model.name=deit_tiny_distilled_patch16_224",
        f"model.kwargs={tiny_deit}",
        f"distill.teacher={teacher}",
        "distill.teacher_model=regnety_016",
        f"distill.teacher_kwargs={small_regnet}",
        "distill.teacher_image_size=48",  # its own, the student's 32 px resized on the device
        "data.image_size=32",
        "data.batch_size=4",
        "data.repeated_augmentation=1",
        "data.reprob=0",  # as above
        "train.steps=2",
        "train.log_every=1",
    ]
    cfg = config.load("imagenet_deit_small_distilled.yaml", overrides)
    assert (cfg.distill.type, cfg.distill.alpha) == ("hard", 0.5)
    summary = loop.train(cfg, tmp_path / "run")
    assert summary.steps == 2 and summary.final_top1 is not None
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records if "train/distill_loss" in r] == [1, 2]
    # The student's two heads: the class token's learns the labels, the distillation token's
    # the teacher.
    params = checkpoint.load_variables(tmp_path / "run")["params"]
    assert params["head"]["kernel"].shape == params["head_dist"]["kernel"].shape == (32, 10)
