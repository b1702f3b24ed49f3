"""`loop.resolve`: the settings a config leaves unset follow the dataset and the network, and
what cannot work (too few logits, too small images, wrong kwargs) is a one-line error."""

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import nets_factory
from nets_training import config, image_sizes, loop, networks
from nets_training.errors import UserError

DEFAULT = Path(__file__).parent.parent / "configs" / "default.yaml"


def resolved(*overrides):
    cfg, dataset, _ = loop.resolve(config.load(DEFAULT, overrides))
    return cfg, dataset


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    for split in ("train", "val"):
        for label, name in enumerate(("ant", "bee")):
            (root / split / name).mkdir(parents=True)
            pixels = np.full((12, 16, 3), 60 + 120 * label, np.uint8)
            Image.fromarray(pixels).save(root / split / name / "0.png")
    return root


def test_default_job_keeps_the_digits_settings_it_measured():
    cfg, _ = resolved()
    d = cfg.data
    assert (d.image_size, d.crop, d.crop_padding, d.flip, d.batch_size) == (8, "pad", 1, False, 64)
    assert (cfg.train.epochs, cfg.model.num_classes) == (20, 10)


def test_a_network_for_larger_images_gets_the_digits_resized_to_its_minimum():
    # MobileNet and VGG divide their input by 32: at 8 px their last stages see 1x1 maps of
    # padding (VGG cannot even run), so the device resizes the digits to 32 px.
    for name in ("mobilenet_v1_025", "vgg16"):
        cfg, _ = resolved(f"model.name={name}")
        assert (cfg.data.image_size, cfg.data.crop_padding, cfg.train.epochs) == (32, 1, 20)


def test_image_files_follow_the_network_not_the_digits(folder):
    cfg, dataset = resolved("model.name=resnet18", "data.name=imagefolder", f"data.dir={folder}")
    d = cfg.data
    assert (d.image_size, d.crop, d.flip, d.crop_padding) == (224, "resized", True, 4)
    assert (cfg.train.epochs, cfg.model.num_classes, dataset.channels) == (90, 2, 3)


def test_what_the_user_sets_wins(folder):
    sets = ["data.image_size=48", "data.crop_padding=3", "train.epochs=2"]
    cfg, _ = resolved("model.name=mobilenet_v1_025", *sets)
    assert (cfg.data.image_size, cfg.data.crop_padding, cfg.train.epochs) == (48, 3, 2)


def test_an_image_size_below_the_networks_minimum_names_it_and_the_fix():
    with pytest.raises(UserError) as error:
        resolved("model.name=vgg16", "data.image_size=8")
    assert str(error.value) == (
        "data.image_size=8: vgg16 needs images of at least 32 px; set data.image_size=32 or "
        "more, or leave it unset"
    )


def test_a_network_made_for_one_size_names_the_sizes_it_takes_and_the_field_for_others():
    with pytest.raises(UserError) as error:
        resolved("model.name=mixer_s32_224", "data.image_size=256")
    assert str(error.value) == (
        "data.image_size=256: mixer_s32_224 takes images of 224 to 255 px, the size its layers "
        "are made for; set data.image_size between them, or leave it unset (other sizes: "
        "model.kwargs.default_image_size)"
    )
    with pytest.raises(UserError, match=r"efficientformer_l1 takes images of 193 to 224 px"):
        resolved("model.name=efficientformer_l1", "data.image_size=192")
    cfg, _ = resolved("model.name=mixer_s32_224")  # the digits' 8 px rise to its size
    assert cfg.data.image_size == 224


@pytest.mark.parametrize(
    ("name", "size"),
    [("resnet20", 4), ("lenet", 4), ("mobilenet_v1_025", 32), ("vgg11", 32), ("alexnet_v2", 67)],
)
def test_in_memory_images_rise_to_the_total_stride_or_what_the_layers_need(name, size):
    # AlexNet v2's 'VALID' stem and pools need more than its stride of 45 px (224 / 5).
    fn = nets_factory.get_network_fn(name, 10, is_training=True)
    assert image_sizes.total_stride_size(fn) == size


def test_a_size_the_user_sets_below_the_stride_is_kept_where_the_layers_accept_it():
    cfg, _ = resolved("model.name=mobilenet_v1_025", "data.image_size=8")
    assert cfg.data.image_size == 8
    with pytest.raises(UserError, match="inception_v3 needs images of at least 107 px"):
        resolved("model.name=inception_v3", "data.image_size=75")  # its auxiliary head


def test_fewer_logits_than_labels_is_refused_more_is_a_warning(caplog):
    with pytest.raises(UserError) as error:
        resolved("model.num_classes=5")
    assert str(error.value) == (
        "model.num_classes=5: digits has 10 classes (labels 0..9); set it to 10 or leave it unset"
    )
    cfg, _ = resolved("model.num_classes=12")
    assert cfg.model.num_classes == 12
    assert "model.num_classes=12 but digits has 10 classes: logits 10..11 are never a target" in (
        caplog.text
    )


def test_mean_and_std_need_one_value_per_channel():
    with pytest.raises(UserError) as error:
        resolved("data.mean=[0.5, 0.5, 0.5]", "data.std=[0.2, 0.2, 0.2]")
    assert str(error.value) == (
        "data.mean: 3 values for 1-channel images (digits); give 1, one per channel, or leave "
        "it unset"
    )
    cfg, _ = resolved("data.mean=[0.5]", "data.std=[0.2]")
    assert (cfg.data.mean, cfg.data.std) == ((0.5,), (0.2,))


@pytest.mark.parametrize(
    ("override", "message", "named"),
    [
        (
            "model.name=resnet5O",
            "model.name: Unknown network 'resnet5O': did you mean ",
            "resnet50",
        ),
        ("model.kwargs.depth=3", "model.kwargs: resnet20 got unexpected keyword argument", "depth"),
        ("model.kwargs.remat=dots", "model.kwargs: remat='dots': use True", "dots_saveable"),
    ],
)
def test_an_unknown_network_or_field_names_the_key(override, message, named):
    model = config.load(DEFAULT, [override]).model
    with pytest.raises(UserError) as error:
        networks.network_fns(model, 10)
    said = str(error.value)
    assert said.startswith(message) and f"'{named}'" in said and "\n" not in said


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ("{num_filters: abc}", "model.kwargs.num_filters: expected int, got 'abc' (str)"),
        ("{stage_sizes: [1, x]}", "model.kwargs.stage_sizes: expected Sequence[int], got (1, 'x')"),
        ("{num_filters: 2.5}", "model.kwargs.num_filters: expected int, got 2.5 (float)"),
        # A function's field (`act = relu` in the listing): a config cannot name one.
        ("{act: gelu}", "model.kwargs.act='gelu': resnet20's act is a Python function"),
    ],
)
def test_network_fields_of_the_wrong_type_name_the_key(kwargs, message):
    model = config.load(DEFAULT, [f"model.kwargs={kwargs}"]).model
    with pytest.raises(UserError) as error:
        networks.network_fns(model, 10)
    assert str(error.value).startswith(message)


def test_network_fields_of_the_right_type_pass():
    model = config.load(DEFAULT, ["model.kwargs={stage_sizes: [1, 1], num_filters: 4}"]).model
    built = networks.network_fns(model, 10)
    assert built.train.module.num_filters == 4
