"""Knowledge distillation (`distill`): the losses against their definitions, the teacher a config
names checked against the student, a distilled train step's loss, and train.py's run with a
teacher (workdir: here; published weights with a distilled DeiT: tests/test_recipes.py)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import yaml

import nets_factory
from nets_training import config, device_augment, distill, loop, steps, teacher
from nets_training.config import DataConfig, DistillConfig, MixupConfig, OptimConfig
from nets_training.errors import UserError
from tests.helpers import train_tiny_run

RNG = np.random.default_rng(0)
STUDENT = RNG.normal(0, 2, (4, 5)).astype(np.float32)
TEACHER = RNG.normal(0, 2, (4, 5)).astype(np.float32)
# The student of the tiny run's teacher: digits, in their own normalisation.
DIGITS = dict(num_classes=10, channels=1, mean=(0.3046,), std=(0.3754,), dtype="float32")


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def distiller(kind: str = "soft", temperature: float = 1.0) -> distill.Distiller:
    """A `Distiller` whose losses alone are used (no teacher network)."""
    return distill.Distiller(None, (1.0,), (0.0,), 8, kind, temperature, 0.5, "")


def test_soft_loss_is_the_kl_divergence_of_softened_distributions_times_t_squared():
    # timm's kl_div(log_softmax(s / T), log_softmax(t / T), 'batchmean', log_target) * T^2,
    # per image (its batch mean is what the step takes).
    t = 3.0
    p, log_q = np.exp(log_softmax(TEACHER / t)), log_softmax(STUDENT / t)
    expected = (p * (np.log(p) - log_q)).sum(-1) * t**2
    loss = distiller(temperature=t).loss(jnp.asarray(STUDENT), jnp.asarray(TEACHER))
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    assert float(jnp.abs(distiller().loss(TEACHER, TEACHER)).max()) < 1e-6  # nothing to learn


def test_hard_loss_is_cross_entropy_against_the_teachers_top_class():
    expected = -log_softmax(STUDENT)[np.arange(4), TEACHER.argmax(-1)]
    loss = distiller(kind="hard", temperature=7.0).loss(STUDENT, TEACHER)  # T plays no part
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_a_distillation_head_learns_the_teacher_and_the_class_head_the_labels():
    cls_logits, dist_logits = jnp.ones((2, 3)), jnp.zeros((2, 3))
    two = {"cls_logits": cls_logits, "dist_logits": dist_logits}
    assert distill.heads((cls_logits + dist_logits) / 2, two) == (cls_logits, dist_logits)
    assert distill.heads(cls_logits, {}) == (cls_logits, cls_logits)


def test_a_workdir_teacher_takes_the_students_images_in_its_own_normalisation(tiny_run):
    same, variables = teacher.distiller(DistillConfig(teacher=str(tiny_run)), **DIGITS)
    run = yaml.safe_load((tiny_run / "config.yaml").read_text())["data"]
    assert (run["mean"], run["std"]) == ([0.3046], [0.3754])  # the student's: nothing to undo
    assert (same.scale, same.shift) == ((1.0,), (0.0,))
    assert same.image_size == run["image_size"] and "params" in variables
    assert same.description == (
        f"distilling from {tiny_run} (resnet20) at {same.image_size} px (soft, alpha 0.5, "
        "temperature 1)"
    )
    # A student normalised otherwise: its pixels are what the teacher's normalisation takes.
    other = {**DIGITS, "mean": (0.2,), "std": (0.5,)}
    step_two = DistillConfig(teacher=str(tiny_run / "checkpoints" / "2"), type="hard")
    newest = DistillConfig(teacher=str(tiny_run / "checkpoints"))  # as finetune.init_from
    assert teacher.distiller(newest, **DIGITS)[0].description == same.description
    moved, _ = teacher.distiller(step_two, **other)
    pixels = np.linspace(0, 1, 5)
    np.testing.assert_allclose(
        (pixels - 0.2) / 0.5 * moved.scale[0] + moved.shift[0], (pixels - 0.3046) / 0.3754
    )
    assert (
        moved.description.endswith("(hard, alpha 0.5)") and "/checkpoints/2 (" in moved.description
    )


@pytest.mark.parametrize(
    "fields, student, message",
    [
        ({}, {"num_classes": 12}, "has 10 classes, the student 12: a teacher must predict"),
        ({}, {"channels": 3}, "takes 1-channel images; the student's have 3"),
        ({"teacher_model": "resnet18"}, {}, "distill.teacher_model: {run}/config.yaml says the"),
    ],
)
def test_a_teacher_that_does_not_fit_the_student_is_one_line(tiny_run, fields, student, message):
    with pytest.raises(UserError) as error:
        teacher.distiller(DistillConfig(teacher=str(tiny_run), **fields), **{**DIGITS, **student})
    assert message.format(run=tiny_run) in str(error.value) and "\n" not in str(error.value)


def test_a_teacher_that_is_neither_a_run_nor_weights_is_one_line(tmp_path):
    with pytest.raises(UserError) as error:
        teacher.distiller(DistillConfig(teacher=str(tmp_path)), **DIGITS)
    assert str(error.value) == (
        f"distill.teacher: {tmp_path} is neither a training workdir (no config.yaml) nor "
        "published weights (a .safetensors, .pth or .h5 file, a Hugging Face folder, a timm "
        "name or a URL)"
    )


def test_a_distilled_step_weighs_the_labels_loss_and_the_teachers(tiny_run):
    alpha, t = 0.25, 2.0
    kd, teacher_variables = teacher.distiller(
        DistillConfig(teacher=str(tiny_run), alpha=alpha, temperature=t), **DIGITS
    )
    tiny = dict(stage_sizes=(1, 1), num_filters=4)
    student = nets_factory.get_network_fn("resnet20", 10, 1e-4, is_training=True, **tiny)
    images = RNG.integers(0, 255, (4, kd.image_size, kd.image_size, 1), np.uint8)
    labels = np.array([0, 1, 2, 3])
    variables = jax.jit(student.init)(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 1)))
    tx = optax.sgd(0.1)
    state = steps.create_state(variables, tx, jax.random.PRNGKey(1), ema=False)
    prepare = lambda x: steps.preprocess(x, kd.image_size, (0.5,), (0.25,))  # noqa: E731
    no_augment = device_augment.make_augment(DataConfig(), MixupConfig(), 10, 0.0)
    loss = steps.make_loss(OptimConfig())
    step = steps.make_train_step(student, tx, prepare, no_augment, loss, 0.0, distiller=kd)
    _, metrics = jax.jit(step)(state, {"image": images, "label": labels}, teacher_variables)

    @jax.jit
    def reference(x):  # the loss's two parts, from the networks' logits
        (logits, _), _ = student.apply(variables, x, mutable=["batch_stats"])
        teacher_logits = kd.teacher_logits(teacher_variables, x)
        labels_loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        p, log_q = jax.nn.softmax(teacher_logits / t), jax.nn.log_softmax(logits / t)
        kl = (jnp.sum(p * (jnp.log(p) - log_q), -1) * t**2).mean()
        return labels_loss, kl, teacher_logits

    labels_loss, kl, teacher_logits = reference(prepare(images))
    penalty = student.regularization_loss(variables["params"])
    np.testing.assert_allclose(metrics["distill_loss"], kl, rtol=1e-4)
    np.testing.assert_allclose(
        metrics["loss"], (1 - alpha) * labels_loss + alpha * kl + penalty, rtol=1e-4
    )
    hits = np.mean(np.argmax(teacher_logits, -1) == labels)
    assert float(metrics["teacher_top1"]) == hits


def test_train_py_distils_from_a_runs_workdir_and_records_the_teachers_part(tiny_run, tmp_path):
    summary = train_tiny_run(
        tmp_path / "student",
        "train.log_every=1",
        f"distill.teacher={tiny_run}",
        "distill.type=hard",
    )
    assert summary.steps == 3 and summary.final_top1 is not None
    lines = (tmp_path / "student" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    trained = [r for r in records if "train/loss" in r]
    assert len(trained) == 3
    assert all(0 <= r["train/teacher_top1"] <= 1 and r["train/distill_loss"] > 0 for r in trained)
    written = config.load(tmp_path / "student" / "config.yaml")
    assert written.distill.teacher == str(tiny_run) and written.distill.type == "hard"
    # The checkpoint holds the student alone: resuming it loads the teacher again.
    resumed = loop.train(
        config.load(tmp_path / "student" / "config.yaml", ["train.steps=4"]), tmp_path / "student"
    )
    assert resumed.steps == 4
