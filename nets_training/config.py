"""Experiment configs: YAML -> typed, validated, frozen dataclasses.

A config file is a diff on the defaults below; `--set a.b=value` overrides are applied to the YAML
tree before validation, so both are checked the same way. Every mistake is a `UserError` naming the
key's dotted path and what would be valid. YAML scalars are read with YAML 1.2's float rule, so
`5e-4` is the float 0.0005 (PyYAML's YAML 1.1 rule would read it as a string).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from nets_training.errors import UserError
from nets_training.image_policies import parse as parse_image_policy


class _Invalid(ValueError):
    """A field's value is invalid; the loader prefixes the section's path."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


def _require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise _Invalid(key, message)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The network, built by `nets_factory.get_network_fn(name, num_classes, weight_decay, ...)`."""

    name: str = "resnet20"  # a key of nets_factory.networks_map (`python -m nets_factory`)
    num_classes: int | None = None  # None: the dataset's classes; fewer is refused, more warned of
    # Slim's L2 penalty, added to the loss by `network_fn.regularization_loss`: its only effect.
    weight_decay: float = 0.0
    # The compute dtype; parameters stay float32. auto: bfloat16 on a GPU or TPU, float32 on a CPU
    # (which has no fast bfloat16 products); the run's config.yaml says which ran.
    dtype: Literal["float32", "bfloat16", "auto"] = "float32"
    # The network's own constructor fields, passed to get_network_fn: e.g. {num_filters: 16}.
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        _require(self.num_classes is None or self.num_classes >= 1, "num_classes", "must be >= 1")
        _require(self.weight_decay >= 0, "weight_decay", "must be >= 0")


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """The input pipeline. Sizes are global: `batch_size` images per step across all devices."""

    # The source: embedded UCI digits, random images, a CIFAR archive, an image folder, or TFDS.
    name: Literal["digits", "synthetic", "cifar10", "cifar100", "imagefolder", "tfds"] = "digits"
    dir: str | None = None  # cifar: the archive or its folder; imagefolder: DIR/{train,val}/<class>
    # cifar: where the data is missing, download its archive into data.dir or (unset) the cache
    download: bool = False
    tfds_name: str | None = None  # name=tfds only, e.g. 'imagenet2012'
    # None: in-memory datasets (digits, CIFAR) their own size, raised to the network's minimum
    # (the device resizes them); image files (imagefolder, tfds) the network's default_image_size.
    image_size: int | None = None
    batch_size: int = 128  # global: images per training step over all devices and hosts
    eval_batch_size: int | None = None  # None: batch_size
    crop: Literal["none", "pad", "resized"] | None = None  # None: the source's default
    # crop=pad: zero padding before the random crop, in the dataset's pixels; None: the
    # source's (digits 1, others 4).
    crop_padding: int | None = None
    min_crop_area: float = 0.08  # crop=resized: smallest crop, as a fraction of the image
    flip: bool | None = None  # random horizontal flip; None: the source's default
    mean: tuple[float, ...] | None = None  # per channel, in [0, 1] units; None: the source's
    std: tuple[float, ...] | None = None  # per channel, in [0, 1] units; None: the source's
    # grain worker processes; 0 decodes in threads of the training process. None: from the CPUs
    # the process may use (`data.with_parallelism`): image files one per CPU but two, else 0.
    workers: int | None = None
    # grain reading threads per process (each worker's, with workers); None: 2, or with image
    # files and no workers, one per CPU (up to 16).
    threads: int | None = None
    synthetic_examples: int = 10_000  # name=synthetic: the length of an epoch
    # An image file that cannot be decoded is logged and skipped (its place in the batch taken by
    # another image of that batch; in evaluation, left out) instead of stopping the run.
    skip_unreadable: bool = False
    # > 1: repeated augmentation (Hoffer et al. 2020; DeiT's RASampler, 3): each epoch takes
    # len / N images of its shuffled order, each N times in a row (N differently augmented
    # copies, in one global batch unless a batch boundary splits them): an epoch keeps its length.
    repeated_augmentation: int = 1
    # Training augmentation beyond crop and flip (docs/guide.md#augmentation-recipes). The
    # interpolation of the training crop and of the policy's geometric ops (timm's
    # --train-interpolation): 'random' draws bilinear or bicubic each time.
    train_interpolation: Literal["bilinear", "bicubic", "random"] = "bilinear"
    # An image policy after crop and flip, on the host with PIL as timm (timm's --aa): RandAugment
    # as 'rand-m9-mstd0.5-inc1' (timm's grammar), AutoAugment's ImageNet policy 'original' (or
    # 'originalr', 'v0', 'v0r', '3a'), or 'ta_wide' (torchvision's TrivialAugment Wide).
    auto_augment: str | None = None
    # > 0: brightness, contrast and saturation each scaled by a factor in [1 - x, 1 + x], in a
    # random order (torchvision's ColorJitter, timm's --color-jitter); not with auto_augment,
    # under which timm drops it.
    color_jitter: float = 0.0
    # Random erasing (Zhong et al. 2020; timm's --reprob): the probability that a training image
    # has boxes erased, on the device after normalisation and mixup, as timm's train.py.
    reprob: float = 0.0
    # The erased boxes' values (timm's --remode): 0 (the mean), one N(0, 1) colour per box, or
    # N(0, 1) per pixel, in normalised units.
    remode: Literal["const", "rand", "pixel"] = "pixel"
    recount: int = 1  # boxes per erased image: 1 to recount, drawn per image (timm's --recount)

    def __post_init__(self):
        _require(
            self.name != "tfds" or bool(self.tfds_name), "tfds_name", "required when name=tfds"
        )
        _require(self.image_size is None or self.image_size >= 1, "image_size", "must be >= 1")
        _require(self.batch_size >= 1, "batch_size", "must be >= 1")
        _require(
            self.eval_batch_size is None or self.eval_batch_size >= 1,
            "eval_batch_size",
            "must be >= 1",
        )
        _require(
            self.crop_padding is None or self.crop_padding >= 0, "crop_padding", "must be >= 0"
        )
        _require(0 < self.min_crop_area <= 1, "min_crop_area", "must be in (0, 1]")
        _require(self.workers is None or self.workers >= 0, "workers", "must be >= 0")
        _require(self.threads is None or self.threads >= 1, "threads", "must be >= 1")
        _require(self.synthetic_examples >= 1, "synthetic_examples", "must be >= 1")
        _require(self.repeated_augmentation >= 1, "repeated_augmentation", "must be >= 1")
        given, missing = ("mean", "std") if self.std is None else ("std", "mean")
        _require(
            (self.mean is None) == (self.std is None),
            given,
            f"set data.{missing} too (give mean and std, or neither: the dataset's own)",
        )
        _require(self.std is None or all(s > 0 for s in self.std), "std", "must be > 0")
        if self.auto_augment is not None:
            try:
                parse_image_policy(self.auto_augment)
            except ValueError as e:
                raise _Invalid("auto_augment", str(e)) from None
        _require(self.color_jitter >= 0, "color_jitter", "must be >= 0")
        _require(
            not (self.color_jitter and self.auto_augment and "3a" not in self.auto_augment),
            "color_jitter",
            "timm turns colour jitter off under an auto_augment policy (other than its '3a'); "
            "set one or the other",
        )
        _require(0 <= self.reprob <= 1, "reprob", "must be in [0, 1]")
        _require(self.recount >= 1, "recount", "must be >= 1")


@dataclasses.dataclass(frozen=True)
class MixupConfig:
    """Mixup (Zhang et al. 2018) and CutMix (Yun et al. 2019) of each training batch on the device,
    as timm's `Mixup`: example i mixes with example batch_size - 1 - i, the targets as the pixels,
    with optim.label_smoothing folded in (docs/guide.md#augmentation-recipes)."""

    mixup_alpha: float = 0.0  # > 0: mixup, the image's own weight drawn from Beta(alpha, alpha)
    cutmix_alpha: float = 0.0  # > 0: cutmix, the kept area drawn from Beta(alpha, alpha)
    # [min, max]: cutmix boxes whose sides are uniform fractions of the image's in [min, max),
    # instead of cutmix_alpha's (and cutmix on): timm's --cutmix-minmax.
    cutmix_minmax: tuple[float, ...] | None = None
    prob: float = 1.0  # the probability that a batch, pair or example (mode) is mixed at all
    switch_prob: float = 0.5  # with mixup and cutmix both on: the probability of cutmix
    # One draw for the whole batch, for each mirrored pair, or for each example.
    mode: Literal["batch", "pair", "elem"] = "batch"

    def __post_init__(self):
        _require(self.mixup_alpha >= 0, "mixup_alpha", "must be >= 0 (0: off)")
        _require(self.cutmix_alpha >= 0, "cutmix_alpha", "must be >= 0 (0: off)")
        minmax = self.cutmix_minmax
        _require(
            minmax is None or (len(minmax) == 2 and 0 < minmax[0] < minmax[1] <= 1),
            "cutmix_minmax",
            "must be [min, max] with 0 < min < max <= 1",
        )
        _require(0 <= self.prob <= 1, "prob", "must be in [0, 1]")
        _require(0 <= self.switch_prob <= 1, "switch_prob", "must be in [0, 1]")

    @property
    def active(self) -> bool:
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0 or self.cutmix_minmax is not None


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """Optimizer, learning-rate schedule and loss options (see `nets_training.optim`)."""

    # The optimizer (optax): plain SGD, heavy-ball or Nesterov momentum, AdamW, RMSProp, LAMB, LARS.
    name: Literal["sgd", "momentum", "nesterov", "adamw", "rmsprop", "lamb", "lars"] = "momentum"
    lr: float = 0.1  # the peak learning rate, reached after warmup
    # > 0: lr *= batch / lr_reference_batch (Goyal et al.), batch the effective one (data.batch_size
    # x accumulate_steps).
    lr_reference_batch: int = 0
    momentum: float = 0.9  # momentum, nesterov, rmsprop, lars
    beta1: float = 0.9  # adamw, lamb
    beta2: float = 0.999  # adamw, lamb
    rms_decay: float = 0.9  # rmsprop: decay of the squared-gradient average
    eps: float = 1e-8  # adamw, lamb, rmsprop
    # Decoupled decay (Loshchilov & Hutter) of adamw/lamb/lars, on conv and dense kernels only:
    # never on norms, biases, layer scales, position embeddings, class/distillation tokens or
    # Swin's relative position tables (timm's no_weight_decay and its 1-D rule leave out the
    # same). The L2 penalty in the loss is model.weight_decay (the same kernels); one run uses
    # one or the other, never both.
    decoupled_weight_decay: float = 0.0
    # The learning rate after warmup, over the rest of the run.
    schedule: Literal["constant", "cosine", "exponential", "polynomial", "step"] = "cosine"
    warmup_epochs: float = 0.0  # linear warmup from 0 to lr, before any schedule
    end_lr: float = 0.0  # cosine, polynomial: the final learning rate
    power: float = 1.0  # polynomial
    decay_rate: float = 0.1  # exponential: per decay_epochs; step: at each boundary
    decay_epochs: float = 2.0  # exponential
    boundaries: tuple[float, ...] = (0.5, 0.75)  # step: fractions of the run
    label_smoothing: float = 0.0  # of the cross-entropy targets (Szegedy et al. 2016)
    # The training loss, on the targets label_smoothing and mixup soften: softmax cross-entropy,
    # or binary cross-entropy of each class's logit (timm's --bce-loss; "ResNet strikes back").
    loss: Literal["cross_entropy", "bce"] = "cross_entropy"
    # bce: targets above it become 1, the others 0 (timm's --bce-target-thresh); None: kept soft.
    bce_target_threshold: float | None = None
    bce_sum: bool = False  # bce: summed over classes (timm's --bce-sum); else averaged over them
    clip_grad_norm: float = 0.0  # > 0: clip the global gradient norm
    # > 0: adaptive gradient clipping (Brock et al. 2021, for NFNets): each output unit's gradient
    # norm at most agc x its weights' norm (that at least 1e-3), the classifier left alone, as
    # timm's --clip-mode agc --clip-grad agc (the paper's 0.01 at batch 4096, 0.02 below 2048).
    agc: float = 0.0
    ema_decay: float = 0.0  # > 0: keep an EMA of the parameters; evaluation uses it
    # Layer-wise learning-rate decay (BEiT; ConvNeXt's fine-tuning): a parameter at depth d of
    # the network's L depths learns at lr * layer_decay ** (L - 1 - d), d from the network
    # (timm's parameter groups: embeddings 0, block i i + 1, the head L - 1; ViT/DeiT, EVA-02,
    # BEiT, ConvNeXt, Swin; MaxViT a group a stage). 1: every parameter at lr.
    layer_decay: float = 1.0
    # Gradient accumulation (optax.MultiSteps): the optimizer steps once every accumulate_steps
    # train steps, on their mean gradient, so a recipe's batch fits a small host: the effective
    # batch is data.batch_size x accumulate_steps, which lr_reference_batch, the schedule and
    # its warmup count in; BatchNorm's statistics are each micro-batch's, updated at each.
    # train.steps must be a multiple of it; epochs round up to whole optimizer steps.
    accumulate_steps: int = 1

    def __post_init__(self):
        _require(self.lr > 0, "lr", "must be > 0")
        _require(self.lr_reference_batch >= 0, "lr_reference_batch", "must be >= 0")
        _require(0 <= self.momentum < 1, "momentum", "must be in [0, 1)")
        _require(0 <= self.beta1 < 1, "beta1", "must be in [0, 1)")
        _require(0 <= self.beta2 < 1, "beta2", "must be in [0, 1)")
        _require(0 <= self.rms_decay < 1, "rms_decay", "must be in [0, 1)")
        _require(self.eps > 0, "eps", "must be > 0")
        _require(self.decoupled_weight_decay >= 0, "decoupled_weight_decay", "must be >= 0")
        _require(
            self.decoupled_weight_decay == 0 or self.name in ("adamw", "lamb", "lars"),
            "decoupled_weight_decay",
            f"decoupled decay applies to adamw, lamb and lars; with {self.name!r} use "
            "model.weight_decay (the L2 penalty in the loss)",
        )
        _require(self.warmup_epochs >= 0, "warmup_epochs", "must be >= 0")
        _require(self.end_lr >= 0, "end_lr", "must be >= 0")
        _require(self.power > 0, "power", "must be > 0")
        _require(0 < self.decay_rate <= 1, "decay_rate", "must be in (0, 1]")
        _require(self.decay_epochs > 0, "decay_epochs", "must be > 0")
        _require(
            all(0 < b < 1 for b in self.boundaries)
            and list(self.boundaries) == sorted(self.boundaries),
            "boundaries",
            "must be increasing fractions of the run, each in (0, 1)",
        )
        _require(0 <= self.label_smoothing < 1, "label_smoothing", "must be in [0, 1)")
        for key in ("bce_target_threshold", "bce_sum"):
            _require(
                self.loss == "bce" or getattr(self, key) in (None, False), key, "needs loss=bce"
            )
        threshold = self.bce_target_threshold
        _require(
            threshold is None or 0 <= threshold < 1, "bce_target_threshold", "must be in [0, 1)"
        )
        _require(self.clip_grad_norm >= 0, "clip_grad_norm", "must be >= 0")
        _require(self.agc >= 0, "agc", "must be >= 0")
        _require(
            not (self.agc and self.clip_grad_norm),
            "agc",
            "clip the gradient one way: set clip_grad_norm or agc, not both",
        )
        _require(0 <= self.ema_decay < 1, "ema_decay", "must be in [0, 1)")
        _require(0 < self.layer_decay <= 1, "layer_decay", "must be in (0, 1]")
        _require(self.accumulate_steps >= 1, "accumulate_steps", "must be >= 1")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Length and cadence of the run."""

    # Passes over the training set, rounded up to whole steps; None: the dataset's (digits 20,
    # CIFAR 164: He et al.'s 64k steps of 128; imagefolder and tfds 90; synthetic 1).
    epochs: float | None = None
    steps: int | None = None  # if set, the run's length in steps instead of epochs
    eval_every: int = 0  # steps; 0: evaluate at the end only
    log_every: int = 50  # steps between training records (metrics.jsonl, TensorBoard, console)
    checkpoint_every: int = 1000  # steps between checkpoints; the run also saves at the end
    keep_checkpoints: int = 3  # the most recent checkpoints kept in <workdir>/checkpoints
    # The weights of the N best evaluations so far (eval top-1; timm's checkpoint history) kept in
    # <workdir>/best, for eval.py --best, export.py --best, finetune.init_from and
    # distill.teacher (<workdir>/best: the best of them), and nets-average (all of them); 0: none.
    keep_best: int = 1
    seed: int = 0  # initialisation, data order, augmentation and dropout

    def __post_init__(self):
        _require(self.steps is None or self.steps >= 1, "steps", "must be >= 1")
        _require(self.epochs is None or self.epochs > 0, "epochs", "must be > 0")
        _require(self.eval_every >= 0, "eval_every", "must be >= 0")
        for key in ("log_every", "checkpoint_every", "keep_checkpoints"):
            _require(getattr(self, key) >= 1, key, "must be >= 1")
        _require(self.keep_best >= 0, "keep_best", "must be >= 0")


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """Start from another run's weights. Paths are 'params/Dense_0/kernel', searched by regex."""

    # A workdir, its checkpoints/ folder, one checkpoints/<step>, its best/ (the best
    # evaluation's weights) or averaged/ (nets-average's); or published weights: a
    # .safetensors / .pth / .h5 file, a Hugging Face folder, or a name or URL downloaded once
    # (resnet50.a1_in1k, hf-hub:timm/resnet50.a1_in1k; see nets_factory.load_pretrained).
    init_from: str | None = None
    exclude: tuple[str, ...] = ()  # variables (params and batch_stats) left at initialisation
    trainable: tuple[str, ...] = ()  # if given, only matching params are updated

    def __post_init__(self):
        for key in ("exclude", "trainable"):
            for pattern in getattr(self, key):
                try:
                    re.compile(pattern)
                except re.error as e:
                    raise _Invalid(key, f"bad regular expression {pattern!r}: {e}") from None


@dataclasses.dataclass(frozen=True)
class DistillConfig:
    """Knowledge distillation (Hinton et al. 2015; DeiT's, Touvron et al. 2021): a trained teacher,
    in evaluation mode, sees each training batch as the student does (augmented and mixed) and
    the student learns its predictions beside the labels (docs/guide.md#distillation). A student
    with a distillation head (DeiT's distilled, LeViT, PiT, EfficientFormer, RepViT:
    `dist_logits`) learns the teacher with it and the labels with the other (`cls_logits`), as
    timm's token distillation; any other student learns both with its logits."""

    # The teacher: a training workdir (its config and newest checkpoint, the EMA where it kept
    # one; or its checkpoints/<step>, best/ or averaged/), or published weights as
    # finetune.init_from takes them (regnety_160.deit_in1k, a file, a folder, a URL). Its classes
    # must be the student's. None: no distillation.
    teacher: str | None = None
    # Published weights only (a workdir's config says both): the teacher's network where the
    # weights do not name it, as model.name.
    teacher_model: str | None = None
    # Published weights only: the teacher's constructor fields, as model.kwargs.
    teacher_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # soft: KL divergence of the teacher's and student's temperature-softened distributions, times
    # temperature^2, per image (timm's); hard: cross-entropy against the teacher's top class (DeiT).
    type: Literal["soft", "hard"] = "soft"
    temperature: float = 1.0  # soft: divides both networks' logits (DeiT's tau)
    # The loss: (1 - alpha) x the labels' loss + alpha x the teacher's (DeiT's
    # --distillation-alpha; timm's task_loss_weight 1 - alpha, distill_loss_weight alpha).
    alpha: float = 0.5
    # The teacher's input size: None: its own (its weights' or its run's), the student's images
    # resized to it on the device where they differ.
    teacher_image_size: int | None = None

    def __post_init__(self):
        _require(self.temperature > 0, "temperature", "must be > 0")
        _require(0 <= self.alpha <= 1, "alpha", "must be in [0, 1]")
        size = self.teacher_image_size
        _require(size is None or size >= 1, "teacher_image_size", "must be >= 1")
        if self.teacher is None:
            for field in dataclasses.fields(self):
                default = (
                    field.default_factory() if field.name == "teacher_kwargs" else field.default
                )
                _require(getattr(self, field.name) == default, field.name, "needs distill.teacher")


@dataclasses.dataclass(frozen=True)
class Config:
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    mixup: MixupConfig = dataclasses.field(default_factory=MixupConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    finetune: FinetuneConfig = dataclasses.field(default_factory=FinetuneConfig)
    distill: DistillConfig = dataclasses.field(default_factory=DistillConfig)

    def __post_init__(self):
        _require(
            not (self.model.weight_decay and self.optim.decoupled_weight_decay),
            "optim.decoupled_weight_decay",
            "set model.weight_decay (L2 in the loss) or optim.decoupled_weight_decay, not both",
        )
        _require(
            not (self.mixup.active and self.mixup.mode == "pair" and self.data.batch_size % 2),
            "data.batch_size",
            "mixup.mode=pair mixes example i with example batch_size - 1 - i: give an even "
            "batch size",
        )


# ---------------------------------------------------------------------------------------------
# Loading.


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's float rule: `5e-4` and `1e3` are floats, not strings."""


_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str, source: str) -> Any:
    """The YAML document in `text`; invalid YAML and duplicate keys are `UserError`s."""
    try:
        node = yaml.compose(text, Loader=_Yaml12Loader)
        if node is None:
            return None
        _refuse_duplicate_keys(node, "", source)
        return _Yaml12Loader(text).construct_document(node)
    except yaml.YAMLError as e:
        raise UserError(f"{source}: invalid YAML: {' '.join(str(e).split())}") from None


def _refuse_duplicate_keys(node: yaml.Node, path: str, source: str) -> None:
    """PyYAML keeps the last of two equal keys silently; a config that says a key twice is
    ambiguous, so it is refused with the key's dotted path and both lines."""
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _refuse_duplicate_keys(item, f"{path}[{i}]", source)
    if not isinstance(node, yaml.MappingNode):
        return
    first_line: dict[tuple[str, str], int] = {}
    for key, value in node.value:
        name = _join(path, key.value) if isinstance(key, yaml.ScalarNode) else path
        if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
            line = key.start_mark.line + 1
            if (key.tag, key.value) in first_line:
                raise UserError(
                    f"{source}: duplicate key {name!r} at line {line} (first at line "
                    f"{first_line[key.tag, key.value]}); say each key once"
                )
            first_line[key.tag, key.value] = line
        _refuse_duplicate_keys(value, name, source)


# Keys that were renamed: a config that still uses the old name is refused with the new one.
RENAMED = {"optim.weight_decay": "optim.decoupled_weight_decay"}
RENAMED_WHY = {
    "optim.decoupled_weight_decay": "adamw/lamb/lars's decay of the weights, beside the gradient; "
    "the L2 penalty in the loss is model.weight_decay"
}

# Switches that became counts: the earlier versions' true and false (a run's config.yaml, when
# it resumes) read as 1 and 0.
COUNTS_ONCE_SWITCHES = ("train.keep_best",)

# The configs the project ships: `configs/` beside the packages in a checkout (and an editable
# install); inside this package in a wheel, where pyproject.toml's package-dir puts them.
_HERE = Path(__file__).resolve().parent
SHIPPED = next((d for d in (_HERE.parent / "configs", _HERE / "configs") if d.is_dir()), None)
DEFAULT = "default.yaml"  # the digits job, the README's main job


def find(name: str | Path) -> Path:
    """A config file: `name` itself where it exists, else the shipped config of that file name
    (`cifar10_resnet20.yaml`, or `configs/cifar10_resnet20.yaml` from any folder), so installed
    programs run the shipped experiments by name."""
    path = Path(name).expanduser()
    if path.is_file() or SHIPPED is None or path.parent not in (Path(), Path("configs")):
        return path  # a path elsewhere is the user's file, found or not
    shipped = SHIPPED / path.name
    return shipped if shipped.is_file() else path


def shipped_names() -> list[str]:
    """The file names of the shipped configs."""
    return sorted(p.name for p in SHIPPED.glob("*.yaml")) if SHIPPED else []


def load(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """Reads a YAML config (a path, or a shipped config's file name: `find`), applies
    `key.path=value` overrides, validates, returns a `Config`."""
    path = find(path)
    if not path.is_file():
        shipped = ", ".join(shipped_names())
        if path.is_dir():
            raise UserError(
                f"config {path} is a folder, not a YAML file (the shipped configs: {shipped})"
            )
        raise UserError(f"config file not found: {path} (the shipped configs: {shipped})")
    tree = parse_yaml(_read_text(path), str(path)) or {}
    if not isinstance(tree, dict):
        raise UserError(f"{path}: the top level must be a mapping of sections, got {tree!r}")
    for override in overrides:
        _apply_override(tree, override)
    return from_dict(tree)


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{path}: not a text file (byte {e.object[e.start]:#04x} at offset {e.start} is not "
            "UTF-8); a config is a YAML text file such as configs/default.yaml"
        ) from None
    except OSError as e:
        raise UserError(f"{path}: cannot read the config file: {e.strerror}") from None


def from_dict(tree: Mapping[str, Any]) -> Config:
    """Validates a nested dict (as read from YAML) into a `Config`."""
    return _build(Config, tree, "")


def _apply_override(tree: dict, override: str) -> None:
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set {override!r}: expected key.path=value, e.g. optim.lr=0.05")
    *parents, leaf = key.strip().split(".")
    node = tree
    for i, part in enumerate(parents):
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise UserError(f"--set {override!r}: {'.'.join(parents[: i + 1])} is not a section")
    node[leaf] = merge(node.get(leaf), parse_yaml(text, f"--set {key}"))


def merge(old: Any, new: Any) -> Any:
    """`new` over `old`, where mappings update the keys they name: so a mapping given to --set
    (`--set 'optim={lr: 0.05}'`) keeps the config's other optim keys, as a config file keeps the
    defaults it does not name. Anything else replaces, the empty mapping too: `--set
    model.kwargs={}` clears the network's keyword arguments."""
    if isinstance(old, dict) and isinstance(new, dict) and new:
        return {**old, **{k: merge(old.get(k), v) for k, v in new.items()}}
    return new


def _build(cls: type, tree: Any, path: str) -> Any:
    if not isinstance(tree, Mapping):
        raise UserError(f"{path or 'config'}: expected a mapping of keys, got {tree!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in tree:
        if (new := RENAMED.get(_join(path, key))) is not None:
            raise UserError(f"config key {_join(path, key)!r} is now {new!r} ({RENAMED_WHY[new]})")
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            where = f"in {path}" if path else "at the top level"
            raise UserError(
                f"unknown config key {_join(path, key)!r}{hint}; valid keys {where}: "
                f"{', '.join(names)}"
            )
    values = {
        k: _convert(hints[k], _count_once_switch(v, _join(path, k)), _join(path, k))
        for k, v in tree.items()
    }
    try:
        return cls(**values)
    except _Invalid as e:
        value = _lookup(values, e.key)
        shown = "" if value is _MISSING else f", got {value!r}"
        raise UserError(f"{_join(path, e.key)}: {e.message}{shown}") from None


def _count_once_switch(value: Any, key: str) -> Any:
    return int(value) if isinstance(value, bool) and key in COUNTS_ONCE_SWITCHES else value


_MISSING = object()


def _lookup(values: Mapping[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        if isinstance(node, Mapping):
            node = node.get(part, _MISSING)
        else:
            node = getattr(node, part, _MISSING)
        if node is _MISSING:
            return _MISSING
    return node


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(inner, value, path)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
    if origin is Literal:
        if value not in args:
            raise UserError(f"{path}: must be one of {', '.join(map(str, args))}; got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise UserError(f"{path}: expected a list, got {value!r}")
        return tuple(_convert(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is Mapping:
        if not isinstance(value, Mapping):
            raise UserError(f"{path}: expected a mapping, got {value!r}")
        return types.MappingProxyType({k: _freeze(v) for k, v in value.items()})
    return _scalar(tp, value, path)


def _scalar(tp: type, value: Any, path: str) -> Any:
    if tp is float and isinstance(value, str):
        try:  # '5e-4' written as a quoted string still means the float.
            return float(value)
        except ValueError:
            pass
    if not _is_scalar(tp, value):
        raise UserError(f"{path}: expected {tp.__name__}, got {value!r} ({type(value).__name__})")
    return float(value) if tp is float else value


def _is_scalar(tp: Any, value: Any) -> bool | None:
    """Whether `value` is of scalar type `tp` as YAML writes it (an int is a float, a bool is not
    an int); None when `tp` is no YAML scalar type."""
    checks = {
        type(None): value is None,
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
    }
    return checks.get(tp)


def check_types(cls: type, values: Mapping[str, Any], path: str) -> None:
    """Checks `values` against the annotated types of dataclass `cls`'s fields, where the type is
    one a YAML value can have (numbers, strings, sequences, optionals); others pass unchecked.

    For `model.kwargs`, whose values go to a network's constructor fields: nothing checks them
    there, so `num_filters: abc` would fail deep inside the first convolution instead.
    """
    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        if key in hints and not _fits(hints[key], value):
            shown = re.sub(
                r"\b(?:collections\.abc|typing)\.|<class '(\w+)'>", r"\1", str(hints[key])
            )
            raise UserError(
                f"{_join(path, key)}: expected {shown}, got {value!r} ({type(value).__name__})"
            )


def _fits(tp: Any, value: Any) -> bool:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(a, value) for a in args)
    if origin in (tuple, list, Sequence):
        if not isinstance(value, tuple | list):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(args) == len(value) and all(map(_fits, args, value))
        return all(_fits(args[0], v) for v in value) if args else True
    if origin is Literal:
        return value in args
    fits = _is_scalar(tp, value)
    return True if fits is None else fits  # Any, callables, modules, cell specs: not YAML's


def _freeze(value: Any) -> Any:
    """Lists become tuples: network fields such as `stage_sizes` expect immutable sequences."""
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def to_dict(config: Any) -> Any:
    """A plain, YAML-safe nested dict of `config` (tuples as lists)."""
    if dataclasses.is_dataclass(config):
        return {f.name: to_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if isinstance(config, Mapping):
        return {k: to_dict(v) for k, v in config.items()}
    if isinstance(config, tuple | list):
        return [to_dict(v) for v in config]
    return config


def changes(before: Mapping[str, Any], after: Mapping[str, Any], path: str = "") -> list[str]:
    """'key.path: old -> new' for every leaf that differs between two `to_dict` trees."""
    lines = []
    for key in sorted(set(before) | set(after), key=str):
        old, new = before.get(key), after.get(key)
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            lines += changes(old, new, _join(path, key))
        elif old != new:
            lines.append(f"{_join(path, key)}: {old!r} -> {new!r}")
    return lines


def dump(config: Config) -> str:
    return yaml.safe_dump(to_dict(config), sort_keys=False)
