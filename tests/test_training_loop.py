"""The loop's decisions without training: what a step end does, and the resolved config."""

import dataclasses
import types

import pytest
import yaml

import nets_factory
from nets_training import config, loop, networks, sources
from nets_training.config import Config, DataConfig, ModelConfig, TrainConfig
from nets_training.errors import UserError

EVERY = dict(log_every=2, eval_every=6, checkpoint_every=3)  # a run of 12 steps


@pytest.mark.parametrize(
    "step, train, stopping, log, evaluate, save",
    [
        (1, EVERY, False, False, False, False),
        (2, EVERY, False, True, False, False),
        (3, EVERY, False, False, False, True),
        (6, EVERY, False, True, True, True),
        (7, EVERY, True, False, False, True),  # a signal: save (then stop), nothing else
        (8, EVERY, True, True, False, True),
        (11, EVERY, False, False, False, False),
        (12, dict(log_every=5, eval_every=5, checkpoint_every=5), False, True, True, True),  # last
        (10, dict(log_every=5, eval_every=0, checkpoint_every=100), False, True, False, False),
        (12, dict(log_every=5, eval_every=0, checkpoint_every=100), False, True, True, True),
    ],
)
def test_due_says_what_a_step_end_does(step, train, stopping, log, evaluate, save):
    assert loop.due(step, TrainConfig(**train), 12, stopping) == loop.Due(log, evaluate, save)


@pytest.fixture
def built_networks(monkeypatch):
    """The names of the networks that `get_network_fn` builds during the test, in order."""
    built, get_network_fn = [], nets_factory.get_network_fn

    def counted(name, *args, **kwargs):
        built.append(name)
        return get_network_fn(name, *args, **kwargs)

    monkeypatch.setattr(nets_factory, "get_network_fn", counted)
    return built


def test_resolve_fills_every_default_from_the_data_and_builds_each_network_once(built_networks):
    resolved, dataset, networks = loop.resolve(Config())
    assert built_networks == ["resnet20", "resnet20"]  # training and evaluation, once each
    written = yaml.safe_load(config.dump(resolved))
    filled = ("image_size", "eval_batch_size", "mean", "std", "crop", "flip", "crop_padding")
    assert {k: written["data"][k] for k in filled} == {
        "image_size": 8,  # the digits' own (resnet20 needs 4 px or more)
        "eval_batch_size": 128,  # data.batch_size
        "mean": [0.3046],  # the digits' own, as are crop, flip and crop_padding
        "std": [0.3754],
        "crop": "pad",
        "flip": False,
        "crop_padding": 1,
    }
    assert written["model"]["num_classes"] == dataset.num_classes == 10
    assert written["train"]["epochs"] == dataset.epochs == 20
    assert networks.train.is_training and not networks.eval.is_training


def test_synthetic_data_takes_the_network_size_and_classes(built_networks):
    cfg = Config(model=ModelConfig(name="resnet18"), data=DataConfig(name="synthetic"))
    resolved, dataset, _ = loop.resolve(cfg)
    assert built_networks == ["resnet18", "resnet18"]
    assert (resolved.data.image_size, resolved.model.num_classes) == (224, 1000)
    assert (dataset.fixed_size, dataset.num_classes) == (224, sources.SYNTHETIC_CLASSES)
    assert dataset.train[0]["image"].shape == (224, 224, 3)


@pytest.mark.parametrize(
    "backend, compute", [("cpu", "float32"), ("gpu", "bfloat16"), ("tpu", "bfloat16")]
)
def test_an_auto_dtype_is_bfloat16_on_accelerators_and_the_config_says_which_ran(
    monkeypatch, backend, compute
):
    assert networks.compute_dtype("auto", backend) == compute
    assert networks.compute_dtype("float32", backend) == "float32"  # what a config sets, it gets
    assert networks.compute_dtype("bfloat16", backend) == "bfloat16"
    monkeypatch.setattr(loop.jax, "default_backend", lambda: backend)
    resolved, _, built = loop.resolve(Config(model=ModelConfig(dtype="auto")))
    assert yaml.safe_load(config.dump(resolved))["model"]["dtype"] == compute
    assert built.train.module.dtype == built.eval.module.dtype == compute


def test_a_resume_compares_an_older_config_with_null_source_defaults_as_their_values(tmp_path):
    resolved, dataset, _ = loop.resolve(Config())
    older = config.to_dict(resolved)
    older["data"].update(mean=None, std=None, crop=None, flip=None)  # as the previous version wrote
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump(older))
    assert loop.changes_since(saved, resolved, dataset) == []
    data = dataclasses.replace(resolved.data, mean=(0.5,), std=(0.25,), flip=True)
    assert loop.changes_since(saved, dataclasses.replace(resolved, data=data), dataset) == [
        "data.flip: False -> True",
        "data.mean: [0.3046] -> [0.5]",
        "data.std: [0.3754] -> [0.25]",
    ]


def test_a_resumed_run_of_an_older_config_sees_no_change_in_keys_it_did_not_know(tmp_path):
    cfg, dataset, _ = loop.resolve(Config())
    older = config.to_dict(cfg)
    del older["data"]["skip_unreadable"]  # written before the key existed
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump(older))
    assert loop.changes_since(saved, cfg, dataset) == []
    newer = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, lr=0.05))
    assert loop.changes_since(saved, newer, dataset) == ["optim.lr: 0.1 -> 0.05"]


def test_a_warmup_that_fills_the_run_becomes_a_tenth_of_it_with_a_note():
    """One epoch of an image folder under the 1-epoch default warmup would end at the peak
    learning rate: the warmup is cut to a tenth of the run, and the note says how to choose."""
    one_epoch = config.OptimConfig(warmup_epochs=1.0, schedule="cosine")
    fitted, note = loop.fit_warmup(one_epoch, steps_per_epoch=391, total_steps=391)
    assert fitted.warmup_epochs == 0.1 and note == (
        "optim.warmup_epochs=1 would take 391 of this run's 391 steps and leave the cosine "
        "schedule no room: warming up for 0.1 epochs instead, a tenth of the run (set "
        "optim.warmup_epochs below 0.5 to choose, or optim.schedule=constant to end at the peak)"
    )
    lr = loop.optim.schedule(fitted, 128, 391, 391)
    assert float(lr(390)) < 1e-3 < float(lr(39))  # decayed by the end
    for kept in [
        (one_epoch, 391, 391 * 30),  # 1 of 30 epochs
        (dataclasses.replace(one_epoch, schedule="constant"), 391, 391),  # asked for the peak
        (dataclasses.replace(one_epoch, warmup_epochs=0.4), 391, 391),
    ]:
        assert loop.fit_warmup(*kept) == (kept[0], None)


def test_a_failed_evaluation_keeps_the_steps_trained_and_the_resumed_run_makes_it(monkeypatch):
    """An unreadable eval image at a step due both an evaluation and a save: the checkpoint is
    written first, the error says so; the run resumed there evaluates that step first."""
    saved, evaluated = [], []
    run = types.SimpleNamespace(
        config=Config(train=TrainConfig(steps=10, eval_every=5, checkpoint_every=5)),
        total_steps=10,
        state="state",
        batches="batches",
        window=types.SimpleNamespace(fetch=lambda: "window"),
        checkpoints=types.SimpleNamespace(directory="ckpts", save=lambda *a: saved.append(a)),
        start_step=5,
    )

    def unreadable(run, step, log, console):
        raise sources.DataError("cannot read image val/dog/1.jpg: truncated")

    monkeypatch.setattr(loop, "check_finite", lambda *a: None)
    monkeypatch.setattr(loop, "log_eval", unreadable)
    with pytest.raises(sources.DataError) as raised:
        loop.on_step_end(run, 5, None, None, None, types.SimpleNamespace(restart=lambda: None))
    assert saved == [(5, "state", "window")]
    assert str(raised.value) == (
        "cannot read image val/dog/1.jpg: truncated; the training state of step 5 was saved "
        "first (ckpts): set data.skip_unreadable=true to leave such images out, and resume"
    )
    monkeypatch.setattr(loop, "log_eval", lambda run, step, log, c: evaluated.append(step))
    records = [{"step": 5, "train/loss": 1.0}]
    loop.evaluate_missed(run, types.SimpleNamespace(records=records), None)
    records.append({"step": 5, "eval/loss": 1.0})
    loop.evaluate_missed(run, types.SimpleNamespace(records=records), None)  # has it: none
    assert evaluated == [5]


def test_the_compile_line_says_why_a_gpus_first_compile_takes_minutes():
    assert loop.compiling_line("cpu", "/cache") == "compiling the train step ..."
    cached = loop.compiling_line("gpu", "/home/me/.cache/jax_nets_factory")
    assert "autotunes" in cached and "reuse them from /home/me/.cache/jax_nets_factory" in cached
    assert "every run does" in loop.compiling_line("gpu", None)


def test_a_run_past_the_configs_end_is_not_resumed_as_done():
    """Resumed with fewer steps than its checkpoint's, a run would say it was done at a step
    its weights are not at (and config.yaml would say that end): the key to raise, in one line."""
    at_450 = types.SimpleNamespace(step=450)
    loop.check_not_past_the_end(at_450, 450, TrainConfig(steps=450))
    loop.check_not_past_the_end(None, 300, TrainConfig(steps=300))  # a new run
    with pytest.raises(UserError) as error:
        loop.check_not_past_the_end(at_450, 300, TrainConfig(steps=300))
    assert str(error.value) == (
        "train.steps=300: the run in this workdir is at step 450, past that end; set "
        "train.steps=450 or more to go on from it, or use another workdir"
    )
    with pytest.raises(UserError, match=r"^train.epochs=10 \(300 steps\): the run in"):
        loop.check_not_past_the_end(at_450, 300, TrainConfig(epochs=10))


@pytest.mark.parametrize(
    ("last", "folder", "ending"),
    [
        (
            None,
            "photos",
            "and start again (`python -m nets_training.check_images photos` lists all)",
        ),
        (300, None, "and resume from step 300"),
    ],
)
def test_an_unreadable_training_image_says_how_to_go_on_without_it(last, folder, ending):
    def unreadable(batches):
        raise sources.DataError("cannot read image photos/train/cat/1.jpg: truncated")

    run = types.SimpleNamespace(
        batches=None,
        checkpoints=types.SimpleNamespace(last_complete_step=lambda: last),
        config=Config(data=DataConfig(name="imagefolder", dir=folder)),
    )
    with pytest.raises(sources.DataError) as raised:
        loop.next_batch(run, types.SimpleNamespace(wait_for=unreadable))
    assert str(raised.value) == (
        "cannot read image photos/train/cat/1.jpg: truncated; set data.skip_unreadable=true to "
        f"leave such files out, {ending}"
    )
