"""PyTorch files as people save them, read without torch (nets_weights.torch_files), and a real
published file: Idelbayev's CIFAR-10 ResNet-20 (github.com/akamaster/pytorch_resnet_cifar10, a
2018 legacy-format `.th` checkpoint with DataParallel's `module.` prefix) computing his code's
logits on real CIFAR-10 test images. Fixtures: tools/fixtures_torch_files.py, torch 2.13."""

import shutil
from pathlib import Path

import numpy as np
import pytest

import nets_factory
from nets_weights import files
from nets_weights.files import WeightFileError

FIXTURES = Path(__file__).parent / "fixtures"
TORCH_FILES = FIXTURES / "torch_files"
REAL = FIXTURES / "real"
RESNET20 = REAL / "resnet20-12fca82f.th"

WEIGHTS = [
    "bare.pth",  # a state dict, torch's zip format
    "legacy_dataparallel.th",  # {'state_dict': {'module.*'}, 'epoch', ...}, pre-1.6 format
    "compiled.pt",  # {'model': {'_orig_mod.*'}, 'step'}
    "both_prefixes.pth",  # '_orig_mod.module.*'
    "model_state_dict.pth.tar",  # {'model_state_dict', 'optimizer_state_dict'}
    "ema_only.pt",  # {'ema', 'updates'}, legacy format
]


@pytest.mark.parametrize("name", WEIGHTS)
def test_checkpoints_as_people_save_them_read_as_torch_reads_them(name):
    expected = np.load(TORCH_FILES / "expected.npz")
    tensors = files.read(TORCH_FILES / name).tensors
    assert sorted(tensors) == sorted(expected.files)
    for key, value in tensors.items():
        # floating tensors as float32 (half and bfloat16 exactly), counters as they are
        want = (
            expected[key].astype(np.float32) if expected[key].dtype.kind == "f" else expected[key]
        )
        assert value.dtype == want.dtype, key
        np.testing.assert_array_equal(value, want, err_msg=key)


def test_files_that_need_weights_only_false_or_hold_no_weights_are_one_line(tmp_path):
    with pytest.raises(WeightFileError) as error:
        files.read(TORCH_FILES / "namespace.pth")
    assert "pickles argparse.Namespace" in str(error.value)
    assert "weights_only=False" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(WeightFileError, match=r"holds no weights: its top-level keys are "):
        files.read(TORCH_FILES / "no_weights.pth")
    (tmp_path / "notes.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(WeightFileError, match=r"notes.pt is not a readable PyTorch file"):
        files.read(tmp_path / "notes.pt")


def _logits(net_fn, variables, images):
    info = net_fn.pretrained
    x = (images / np.float32(255) - np.float32(info.mean)) / np.float32(info.std)
    return np.asarray(net_fn.apply(variables, x)[0])


def test_a_real_published_checkpoint_computes_its_publishers_logits(tmp_path):
    # By its published name, as a download's cache keeps it: the catalogue names its network.
    shutil.copy(RESNET20, tmp_path / RESNET20.name)
    net_fn, variables = nets_factory.load_pretrained(None, tmp_path / RESNET20.name)
    reference = np.load(REAL / "resnet20_cifar10.npz")
    logits = _logits(net_fn, variables, reference["images"])
    error = np.abs(logits - reference["logits"]).max() / np.abs(reference["logits"]).max()
    assert error < 1e-4
    assert np.array_equal(logits.argmax(-1), reference["logits"].argmax(-1))
    # 94 of the first 100 test images (his README: 91.73% of all 10,000)
    assert np.sum(logits.argmax(-1) == reference["labels"]) == 94
    info = net_fn.pretrained
    assert (info.source, info.image_size, info.class_names[3]) == ("resnet20", 32, "cat")


def test_option_a_padding_is_a_convention_of_the_weights():
    # His shortcuts pad the new channels on both sides; ours after: a field, set by the weights.
    with pytest.raises(ValueError, match=r"shortcut_padding='both'; shortcut_padding='after'"):
        nets_factory.load_pretrained("resnet20", RESNET20, shortcut_padding="after")
    net_fn = nets_factory.get_network_fn("resnet20", 10, shortcut_padding="left")
    with pytest.raises(ValueError, match=r"shortcut_padding='left': expected one of"):
        net_fn.init(np.zeros(2, np.uint32), np.zeros((1, 32, 32, 3), np.float32))


def test_a_checkpoint_of_another_depth_or_width_names_the_difference():
    with pytest.raises(WeightFileError) as error:
        nets_factory.load_pretrained("resnet32", RESNET20)
    assert str(error.value).endswith(
        "is for a network of another depth (blocks in the file vs this network: "
        "layer1 3 vs 5, layer2 3 vs 5, layer3 3 vs 5)"
    )
    with pytest.raises(WeightFileError, match=r"'layer1.0.bn1.running_mean' has shape \(16,\); "):
        nets_factory.load_pretrained("resnet20", RESNET20, num_filters=32)
