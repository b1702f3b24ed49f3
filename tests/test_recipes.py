"""The fine-tuning recipe (configs/finetune_vit_small.yaml) runs from published weights: the ViT
parity fixture (tests/fixtures/parity/vit_small_config, timm's weights of a tiny ViT) onto a
small image folder, with the recipe's options on (random erasing aside) and gradient accumulation
over two micro-batches. (Every shipped config validates in tests/test_training_config.py; resuming
between micro-batches in tests/test_accumulation.py.)"""

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


def image_folder(root: Path) -> Path:
    """Two classes of 40x40 RGB images: 4 each to train on, 1 each to evaluate."""
    rng = np.random.default_rng(0)
    for split, count in (("train", 4), ("val", 1)):
        for label in ("cat", "dog"):
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
