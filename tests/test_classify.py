"""classify.py and `nets_weights.predict`: the weights' own preprocessing, top-k class names."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib import cbook
from PIL import Image

import nets_factory
from nets_weights import architectures, predict

ROOT = Path(__file__).parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "parity" / "resnet_bottleneck"
PHOTO = cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)


def test_preprocess_resizes_the_short_side_crops_the_centre_and_normalises():
    info = architectures.Pretrained(source="x", file="x", image_size=8, crop_fraction=0.5)
    white = (1 - np.asarray(info.mean)) / np.asarray(info.std)
    black = -np.asarray(info.mean) / np.asarray(info.std)
    # 20x40 -> short side 16 (8 / 0.5), 16x32; the centred 8x8 is rows 4-11, columns 12-19 of
    # the resized image: columns 15-25 of the original hold it, its outer thirds do not.
    inside, outside = np.zeros((20, 40, 3), np.uint8), np.zeros((20, 40, 3), np.uint8)
    inside[:, 12:28] = 255
    outside[:, :12] = outside[:, 28:] = 255
    out = predict.preprocess(Image.fromarray(inside), info)
    assert out.shape == (8, 8, 3) and out.dtype == np.float32
    np.testing.assert_allclose(out, np.broadcast_to(white, out.shape), rtol=1e-5)
    out = predict.preprocess(Image.fromarray(outside), info)
    np.testing.assert_allclose(out, np.broadcast_to(black, out.shape), rtol=1e-5)


def test_top_k_names_classes_with_probabilities(tmp_path):
    network_fn, variables = nets_factory.load_pretrained(
        "resnet50", FIXTURE, stage_sizes=(2, 1, 1, 1), num_filters=8
    )
    images = predict.read_images([PHOTO, PHOTO], network_fn.pretrained)
    assert images.shape == (2, 224, 224, 3)
    # One unreadable file among the photos: the others are classified all the same.
    (tmp_path / "x.jpg").write_text("not an image")
    best = predict.classify_files(network_fn, variables, [PHOTO, tmp_path / "x.jpg", PHOTO], k=3)
    assert str(best.pop(1)).startswith(f"cannot read image {tmp_path / 'x.jpg'}: ")
    assert len(best) == 2 and [n for n, _ in best[0]] == [n for n, _ in best[1]]
    # one image twice: the rows of a batch may differ in the last bits (XLA's CPU kernels)
    np.testing.assert_allclose([p for _, p in best[0]], [p for _, p in best[1]], rtol=1e-5)
    probabilities = [p for _, p in best[0]]
    assert probabilities == sorted(probabilities, reverse=True) and 0 < sum(probabilities) <= 1
    assert {name for name, _ in best[0]} <= {str(i) for i in range(10)}  # no names: 10 classes


def test_weights_without_a_classifier_are_refused_in_one_line():
    # DINOv2's and SigLIP's files give features: there are no classes to rank.
    features = ROOT / "tests" / "fixtures" / "parity" / "dinov2_reg_features_42"
    thin = {"patch_size": 7, "embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 28}
    network_fn, variables = nets_factory.load_pretrained(None, features, **thin)
    with pytest.raises(ValueError, match=r"^vit_small_patch14_reg4_dinov2's weights hold no cl"):
        predict.classify_files(network_fn, variables, [PHOTO])


def test_unreadable_image_is_one_line(tmp_path):
    (tmp_path / "x.jpg").write_text("not an image")
    info = architectures.Pretrained(source="x", file="x")
    with pytest.raises(ValueError, match=r"cannot read image .*x.jpg"):
        predict.read_images([tmp_path / "x.jpg"], info)


@pytest.mark.slow  # classify.py run as a subprocess
def test_classify_command_errors_are_one_line():
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "classify.py"),
            "--model=resnet50",
            f"--weights={FIXTURE}",
            PHOTO,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "PATH": ""},
    )
    assert result.returncode == 2
    assert (
        result.stderr.startswith("classify.py: ") and len(result.stderr.strip().splitlines()) == 1
    )
    assert "needs (64,) (a file for another configuration" in result.stderr  # a small file


@pytest.mark.slow  # classify.py run as subprocesses
@pytest.mark.parametrize(
    "args, message",
    [
        (
            [PHOTO],
            "--weights is required: published weights (a file, a Hub folder, a Hub name or a "
            "URL), e.g. --weights=resnet50.a1_in1k",
        ),
        (["--weights=resnet50.a1_in1k"], "give one or more image files, e.g. photo.jpg or *.jpg"),
        (  # said before the weights are fetched (this test has no network)
            ["--weights=resnet50.a1_in1k", "no.jpg", "nor.png"],
            "no such file: no.jpg, nor.png (nothing to classify)",
        ),
        (  # a folder is read for its images, sub-folders too
            ["--weights=resnet50.a1_in1k", "configs"],
            "configs: a folder with no image files (.jpg, .jpeg, .png, .webp, .bmp, .gif, .tif, "
            ".tiff)",
        ),
        # A count of classes below 1 (a Python slice would print 7 of 10 for -3, none for 0).
        (
            ["--weights=resnet50.a1_in1k", "--top=0", PHOTO],
            "flag --top=0: 0 is not a positive integer",
        ),
        (
            ["--weights=resnet50.a1_in1k", "--top=-3", PHOTO],
            "flag --top=-3: -3 is not a positive integer",
        ),
    ],
)
def test_a_missing_argument_is_one_line_of_ours(args, message):
    result = subprocess.run(
        [sys.executable, str(ROOT / "classify.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "PATH": ""},
    )
    assert (result.returncode, result.stderr) == (2, f"classify.py: {message}\n")
