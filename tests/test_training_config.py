"""Experiment configs: every shipped YAML validates; every mistake names its dotted key."""

from pathlib import Path

import pytest

import nets_factory
from nets_training import config
from nets_training.errors import UserError
from nets_weights import architectures, catalogue

CONFIGS = sorted(Path(__file__).parent.parent.glob("configs/*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load_validate_and_build(path):
    text = path.read_text()
    assert text.startswith("#") and "python train.py" in text.splitlines()[0], "command first"
    assert len(text.splitlines()) <= 45
    cfg = config.load(path)
    kwargs = dict(cfg.model.kwargs)
    nets_factory.get_network_fn(cfg.model.name, cfg.model.num_classes or 10, **kwargs)
    if cfg.distill.teacher:  # published weights the catalogue knows (loading them downloads)
        assert catalogue.architecture_of(cfg.distill.teacher) in architectures.ARCHITECTURES
    assert config.from_dict(config.parse_yaml(config.dump(cfg), "dump")) == cfg


def test_default_config_matches_the_readme_main_job():
    cfg = config.load(Path(__file__).parent.parent / "configs/default.yaml")
    assert cfg.data.name == "digits"  # embedded: no download


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_scientific_notation_is_a_float_in_files_and_overrides(tmp_path):
    path = write(tmp_path, "optim: {lr: 5e-4, eps: '1e-6'}\nmodel: {weight_decay: 1E-4}\n")
    cfg = config.load(path, ["optim.end_lr=2e-5"])
    assert (cfg.optim.lr, cfg.optim.eps, cfg.optim.end_lr) == (5e-4, 1e-6, 2e-5)
    assert cfg.model.weight_decay == 1e-4


def test_overrides_reach_nested_kwargs_and_lists_become_tuples(tmp_path):
    cfg = config.load(write(tmp_path, ""), ["model.kwargs.stage_sizes=[1, 2]", "train.steps=7"])
    assert cfg.model.kwargs["stage_sizes"] == (1, 2)
    assert cfg.train.steps == 7
    with pytest.raises(TypeError):  # frozen all the way down
        cfg.model.kwargs["x"] = 1


@pytest.mark.parametrize(
    "text, overrides, message",
    [
        ("optim: {lrr: 0.1}", [], "unknown config key 'optim.lrr' (did you mean 'lr'?); valid"),
        ("", ["optim.lrr=0.1"], "valid keys in optim: name, lr,"),
        ("modle: {}", [], "unknown config key 'modle' (did you mean 'model'?)"),
        ("optim: {lr: fast}", [], "optim.lr: expected float, got 'fast' (str)"),
        ("train: {steps: 1.5}", [], "train.steps: expected int, got 1.5"),
        ("data: {flip: 1}", [], "data.flip: expected bool, got 1"),
        ("optim: {lr: -1}", [], "optim.lr: must be > 0, got -1.0"),
        ("optim: {name: adam}", [], "optim.name: must be one of sgd, momentum, nesterov, adamw"),
        ("optim: {schedule: linear}", [], "optim.schedule: must be one of constant, cosine"),
        ("optim: {boundaries: [0.7, 0.2]}", [], "optim.boundaries: must be increasing"),
        ("optim: {decoupled_weight_decay: 1e-4}", [], "decoupled_weight_decay: decoupled decay"),
        ("optim: {weight_decay: 1e-4}", [], "'optim.weight_decay' is now 'optim.decoupled_weight"),
        ("optim: {name: lamb, decoupled_weight_decay: 1}\nmodel: {weight_decay: 1}", [], "both"),
        ("finetune: {exclude: ['(']}", [], "finetune.exclude: bad regular expression '('"),
        ("data: {name: tfds}", [], "data.tfds_name: required when name=tfds"),
        ("data: {mean: [0.5]}", [], "data.mean: set data.std too (give mean and std, or neither"),
        ("data: {std: [0.5]}", [], "data.std: set data.mean too"),
        ("optim: [1, 2]", [], "optim: expected a mapping of keys"),
        ("", ["optim.lr"], "--set 'optim.lr': expected key.path=value"),
        ("", ["optim.lr.x=1"], "optim.lr: expected float, got {'x': 1} (dict)"),
        ("", ["optim.lr=[1"], "--set optim.lr: invalid YAML"),
        ("optim: {lr: 0.1", [], "invalid YAML"),
        ("- 1", [], "the top level must be a mapping"),
        ("optim:\n  lr: 0.1\n  lr: 0.2", [], "c.yaml: duplicate key 'optim.lr' at line 3 (first"),
        ("model: {kwargs: {a: 1, a: 2}}", [], "duplicate key 'model.kwargs.a' at line 1"),
        ("", ["optim={lr: 1, lr: 2}"], "--set optim: duplicate key 'lr' at line 1"),
        ("\x00", [], "invalid YAML: unacceptable character #x0000"),
        ("mixup: {mixup_alpha: -0.8}", [], "mixup.mixup_alpha: must be >= 0 (0: off), got -0.8"),
        ("mixup: {cutmix_minmax: [0.8, 0.2]}", [], "mixup.cutmix_minmax: must be [min, max] with"),
        ("mixup: {mode: pair, cutmix_alpha: 1}\ndata: {batch_size: 7}", [], "data.batch_size: mix"),
        ("data: {reprob: 1.5}", [], "data.reprob: must be in [0, 1], got 1.5"),
        ("data: {remode: noise}", [], "data.remode: must be one of const, rand, pixel"),
        ("data: {auto_augment: rand-m9, color_jitter: 0.4}", [], "data.color_jitter: timm turns"),
        ("optim: {bce_target_threshold: 0.2}", [], "optim.bce_target_threshold: needs loss=bce"),
        ("distill: {type: hard}", [], "distill.type: needs distill.teacher, got 'hard'"),
        ("optim: {agc: 0.01, clip_grad_norm: 1}", [], "optim.agc: clip the gradient one way"),
        ("distill: {teacher: x, alpha: 1.5}", [], "distill.alpha: must be in [0, 1], got 1.5"),
    ],
)
def test_config_mistakes_name_the_key_and_what_is_valid(tmp_path, text, overrides, message):
    with pytest.raises(UserError) as error:
        config.load(write(tmp_path, text), overrides)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_a_binary_config_file_is_one_line(tmp_path):
    path = tmp_path / "weights.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(UserError) as error:
        config.load(path)
    assert str(error.value) == (
        f"{path}: not a text file (byte 0x89 at offset 0 is not UTF-8); a config is a YAML text "
        "file such as configs/default.yaml"
    )


def test_a_section_given_to_set_merges_into_the_config(tmp_path):
    path = write(tmp_path, "optim: {name: nesterov, lr: 0.2}\nmodel: {kwargs: {num_filters: 8}}")
    cfg = config.load(path, ["optim={lr: 0.05}", "model={kwargs: {stage_sizes: [1, 1]}}"])
    assert (cfg.optim.name, cfg.optim.lr) == ("nesterov", 0.05)
    assert dict(cfg.model.kwargs) == {"num_filters": 8, "stage_sizes": (1, 1)}
    replaced = config.load(path, ["optim.boundaries=[0.3]", "optim.name=sgd"]).optim
    assert (replaced.name, replaced.boundaries, replaced.lr) == ("sgd", (0.3,), 0.2)


def test_an_empty_mapping_given_to_set_clears_it(tmp_path):
    path = write(tmp_path, "model: {name: resnet18, kwargs: {num_filters: 8}}")
    cfg = config.load(path, ["model.kwargs={}"])
    assert dict(cfg.model.kwargs) == {} and cfg.model.name == "resnet18"


def test_missing_config_file_or_a_folder(tmp_path):
    with pytest.raises(UserError, match="config file not found: .*nope.yaml"):
        config.load(tmp_path / "nope.yaml")
    # A folder given for the file (`--config=configs`): said so, with the configs to choose from.
    with pytest.raises(UserError) as error:
        config.load(tmp_path)
    assert str(error.value).startswith(
        f"config {tmp_path} is a folder, not a YAML file (the shipped configs: cifar10_resnet20"
    )


def test_steps_override_epochs_so_one_set_shortens_any_config(tmp_path):
    cfg = config.load(write(tmp_path, "train: {epochs: 90}"), ["train.steps=3"])
    assert (cfg.train.epochs, cfg.train.steps) == (90.0, 3)


def test_changes_name_each_differing_key(tmp_path):
    before = config.to_dict(config.load(write(tmp_path, "")))
    after = config.to_dict(config.load(write(tmp_path, ""), ["optim.lr=0.05", "train.steps=9"]))
    assert config.changes(before, after) == ["optim.lr: 0.1 -> 0.05", "train.steps: None -> 9"]
