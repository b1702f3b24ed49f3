"""Filling a network's variables from a file's tensors, with every tensor accounted for.

A family's *layout* translates one of our module paths (`('BottleneckResNetBlock_3',
'Conv_1')`) into the source's module prefix (`'layer2.0.conv2'`); the leaf names and layouts of
a framework's tensors are the same for every family it wrote (a `Framework`: `TORCH`, the
default, or `KERAS`, Keras 2's HDF5 weights: `conv1/kernel:0`, kernels already HWIO). `plan`
checks the whole file against the whole network before anything is converted, so a bad file
fails with one line naming the first tensor that does not fit: a missing one, a shape that
differs, or tensors the network does not use (a file for another architecture).

Two generic views cover layers one library writes as a convolution and another as a dense layer
(`_view`; Keras's own are in `_keras_layout`): a `Linear` weight `[out, c * kh * kw]` fills our
`kh x kw` convolution kernel (torchvision's VGG and AlexNet `classifier.*`: PyTorch flattens NCHW
maps channel-major; with `kh = kw = 1`, Slim's 1x1 convolution classifiers and our MobileNet V3's
`Conv_2`), and a 1x1 convolution `[out, in, 1, 1]` fills our dense kernel (timm's `use_conv`
heads). A family whose files come in several key layouts (timm's and torchvision's VGG) lists
the others as `alternatives`; `for_keys` picks the one whose classifier the file holds.

Images of other than three channels (grayscale, multispectral) take the file's RGB input
convolutions adapted by timm's `in_chans` rule (`input_channels_adapted`).
"""

import dataclasses
import math
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

import flax.linen as nn
import jax
import numpy as np

from nets_weights.files import WeightFileError

Path = tuple[str, ...]  # ('params', 'conv_init', 'kernel')
RGB = 3  # the image channels of every published file's input convolutions
# ImageNet's mean and std of [0, 1] RGB, which most published weights expect (`Pretrained`'s
# default); OpenAI CLIP's, which the weights trained from it or as it was expect (LAION's CLIP
# ConvNeXt-XXL, EVA-02): timm's `OPENAI_CLIP_MEAN`, `OPENAI_CLIP_STD`.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

Layout = Callable[[Path], str]  # our module path (no collection, no leaf) -> source prefix
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Framework:
    """A source framework's key and layout conventions, the same for every family it wrote."""

    separator: str  # between a module prefix and a leaf: 'layer1.0.conv1' + '.' + 'weight'
    leaves: Mapping[str, tuple[str, ...]]  # our leaf -> the source's names for it, tried in order
    # (our leaf name, the tensor's shape, our variable's shape) -> the shape to view the tensor
    # as (or None), and the permutation of the viewed axes (or None) that gives ours.
    layout: Callable[[str, tuple[int, ...], tuple[int, ...]], tuple[tuple | None, tuple | None]]
    kernel_outputs: int  # the axis of a classifier kernel that counts the classes
    dropped: tuple[str, ...] = ()  # leaves with no counterpart
    # A source layer's kernels that are one module each of ours (Keras's SeparableConv2D holds a
    # `depthwise_kernel` and a `pointwise_kernel`): a layout names one as `layer/pointwise`.
    parts: tuple[str, ...] = ()

    def keys(self, prefix: str, leaf: str) -> list[str]:
        """The keys a variable `leaf` of the source's module `prefix` may have, in order."""
        layer, _, part = prefix.rpartition(self.separator)
        if part in self.parts:  # `sep/pointwise`, `kernel` -> `sep/pointwise_kernel:0`
            return [f"{layer}{self.separator}{part}_{self.leaves[leaf][0]}"]
        # A parameter of the network itself (a ViT's `cls_token`) has no module prefix.
        return [f"{prefix}{self.separator}{name}" if prefix else name for name in self.leaves[leaf]]


def _torch_layout(leaf: str, got: tuple[int, ...], shape: tuple[int, ...]):
    view = _view(leaf, got, shape)
    return view, _permutation(leaf, len(shape))


def torch_layout_viewing(*leaves: str):
    """PyTorch's layouts, and the tensors of `leaves` viewed as our shape where they hold as many
    values: torchvision's layer scale `[c, 1, 1]` as our `[c]`, timm's standardised
    convolutions' gain `[out, 1, 1, 1]` as our `[out]`."""

    def layout(leaf: str, got: tuple[int, ...], shape: tuple[int, ...]):
        if leaf in leaves and got != shape and math.prod(got) == math.prod(shape):
            return shape, None
        return _torch_layout(leaf, got, shape)

    return layout


# Our leaf names -> PyTorch's: convolution/dense weights, BatchNorm's affine and statistics;
# `num_batches_tracked`, BatchNorm's counter, has no counterpart.
TORCH = Framework(
    separator=".",
    leaves={
        "kernel": ("weight",),
        "scale": ("weight",),
        "bias": ("bias",),
        "mean": ("running_mean",),
        "var": ("running_var",),
    },
    layout=_torch_layout,
    kernel_outputs=0,
    dropped=("num_batches_tracked",),
)


def _keras_layout(leaf: str, got: tuple[int, ...], shape: tuple[int, ...]):
    """Keras's kernels are ours but for three views: a depthwise kernel `[kh, kw, c, multiplier]`
    as our `[kh, kw, 1, c * multiplier]` (channel-major, as Keras orders its outputs), a 1x1
    convolution `[1, 1, in, out]` as our dense `[in, out]`, and a dense kernel as our 1x1
    convolution."""
    depthwise = len(got) == len(shape) == 4 and got[:2] == shape[:2] and shape[2] == 1
    one_by_one = got == (1, 1, *shape) or shape == (1, 1, *got)
    if leaf == "kernel" and got != shape and (one_by_one or depthwise):
        return (shape if math.prod(got) == math.prod(shape) else None), None
    return None, None


# Keras 2's HDF5 weight names (`conv1/kernel:0`, `conv1_bn/moving_mean:0`), in Keras's layouts.
KERAS = Framework(
    separator="/",
    leaves={
        "kernel": ("kernel:0", "depthwise_kernel:0"),
        "scale": ("gamma:0",),
        "bias": ("bias:0", "beta:0"),
        "mean": ("moving_mean:0",),
        "var": ("moving_variance:0",),
    },
    layout=_keras_layout,
    kernel_outputs=-1,
    parts=("depthwise", "pointwise"),
)


@dataclasses.dataclass(frozen=True)
class Architecture:
    """How one published architecture's files load into one of our networks."""

    network: str  # our registry name
    convention: Mapping[str, Any]  # constructor fields the weights need (their padding, ...)
    layout: Callable[[nn.Module], Layout]  # the built module -> our paths to the file's keys
    head: tuple[str, ...]  # our classifier's module path
    source_head: str  # the file's classifier prefix
    # Other key layouts of the same network's files (torchvision's, where this one is timm's),
    # each with its convention: `for_keys` picks one by the classifier the file holds.
    alternatives: tuple["Architecture", ...] = ()
    # Further classifiers over the same classes, replaced with the first (DeiT's distillation
    # head): our module path and the file's prefix of each.
    other_heads: tuple[tuple[tuple[str, ...], str], ...] = ()
    # The file's prefixes of layers that only the classifier reads (MetaFormer's MLP head before
    # its last layer): they fill ours whenever the network has a classifier, of the file's class
    # count or another (as timm's loading keeps them when it replaces the last layer), and a
    # network without one (0 classes) leaves them out.
    head_hidden: tuple[str, ...] = ()
    # The file's module prefixes the network leaves out, as the reference does when it loads them
    # (torchvision's training-only auxiliary classifiers).
    dropped: tuple[str, ...] = ()
    # `Pretrained` fields for files without a config.json that says them, where the weights
    # expect other inputs than torchvision's ResNets (Inception's 299 px, in [-1, 1]) or their
    # logits are not ImageNet's classes (`class_names`).
    preprocessing: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    framework: Framework = TORCH  # the files' key names and tensor layouts
    # The file's keys -> the names `layout` gives, for files whose names depend on how they
    # were written (Keras's automatic `conv2d_7` numbering: `keras_inception.renumber`).
    rename: Callable[[Collection[str]], Mapping[str, str]] | None = None
    # The file's tensors that fill no variable but say what inputs the weights expect (Keras's
    # EfficientNet holds its input normalization): `check(tensors, what)` raises
    # `WeightFileError` where they differ from what `preprocessing` states.
    check: Callable[[Mapping[str, np.ndarray], str], None] | None = None
    # Whether the source publishes files without a classifier (DINOv2's self-supervised
    # weights): those load as features, 0 classes, where a file of other families without one
    # is refused as not the network's.
    headless: bool = False
    # Our module paths that such a file may lack too (ConvNeXt V2's FCMAE encoders have no
    # `head.norm`): they keep their initial values, as the reference's non-strict load leaves
    # them.
    headless_lacks: tuple[tuple[str, ...], ...] = ()

    def stable(self, tensors: Mapping[str, T]) -> dict[str, T]:
        """The file's tensors (or shapes) under the names `layout` gives: `rename`'s."""
        if self.rename is None:
            return dict(tensors)
        names = self.rename(list(tensors))
        return {names[key]: value for key, value in tensors.items()}

    @property
    def head_kernel(self) -> str:
        """The file's key of the classifier kernel."""
        return self.framework.keys(self.source_head, "kernel")[0]

    def drops(self, key: str) -> bool:
        """Whether the file's tensor `key` belongs to a module the network leaves out."""
        return self._under(key, self.dropped)

    def in_head(self, key: str) -> bool:
        """Whether the file's tensor `key` belongs to one of its classifiers."""
        return self._under(key, (self.source_head, *(prefix for _, prefix in self.other_heads)))

    def feeds_head(self, key: str) -> bool:
        """Whether the file's tensor `key` belongs to a layer of `head_hidden`."""
        return self._under(key, self.head_hidden)

    def heads(self, paths: Collection[Path]) -> list[Path]:
        """The variable paths (`('params', 'head', 'kernel')`) of our classifiers."""
        ours = (self.head, *(path for path, _ in self.other_heads))
        return [p for p in paths if any(p[1 : 1 + len(h)] == h for h in ours)]

    def _under(self, key: str, prefixes: tuple[str, ...]) -> bool:
        return key.startswith(tuple(prefix + self.framework.separator for prefix in prefixes))


def same_layout(layout: Layout) -> Callable[[nn.Module], Layout]:
    """`Architecture.layout` for a family whose key names do not depend on the built module."""
    return lambda module: layout


def timm_and_torchvision(
    network: str,
    framework: Framework,
    *,
    timm_layout: Layout,
    torchvision_layout: Layout,
    torchvision_head: str,
    timm_preprocessing: Mapping[str, Any],
    torchvision_preprocessing: Mapping[str, Any],
) -> Architecture:
    """timm's files (classifier `head.fc`), with torchvision's of the same network as the
    alternative, for families whose key names do not depend on the built module (ConvNeXt,
    Swin): our classifier is `head` in both; the preprocessing is of files without a config."""
    torchvision = Architecture(
        network,
        {},
        same_layout(torchvision_layout),
        head=("head",),
        source_head=torchvision_head,
        framework=framework,
        preprocessing=torchvision_preprocessing,
    )
    return Architecture(
        network,
        {},
        same_layout(timm_layout),
        head=("head",),
        source_head="head.fc",
        alternatives=(torchvision,),
        framework=framework,
        preprocessing=timm_preprocessing,
    )


def module_index(name: str, kind: str) -> int:
    """The number in one of our numbered module names: `module_index('blocks_3', 'blocks')` is 3.
    Layouts use it to find a source's numbering; anything else is a bug, said as one line."""
    match = re.fullmatch(rf"{kind}_(\d+)", name)
    if match is None:
        raise ValueError(f"not a module path we number: {name!r} (expected {kind}_N)")
    return int(match.group(1))


def for_keys(arch: Architecture, keys: Collection[str]) -> Architecture:
    """`arch`, or the first of its `alternatives` whose classifier `keys` hold when `arch`'s is
    not there (a file with neither is `arch`'s, and its errors name `arch`'s keys)."""
    for candidate in (arch, *arch.alternatives):
        if candidate.head_kernel in candidate.stable(dict.fromkeys(keys)):
            return candidate
    return arch


@dataclasses.dataclass(frozen=True)
class Step:
    """One variable: which tensor fills it, and how its axes move."""

    target: Path
    source: str
    permutation: tuple[int, ...] | None
    view: tuple[int, ...] | None = None  # the source's shape before `permutation`, if reshaped
    in_chans: int | None = None  # an RGB input convolution's kernel, for these image channels


def input_channels_adapted(kernel: np.ndarray, in_chans: int) -> np.ndarray:
    """An RGB input convolution's kernel `[kh, kw, 3, out]` for images of `in_chans` channels,
    as timm's `adapt_input_conv`: one channel sums R, G and B (so a gray image `g` computes
    what `(g, g, g)` did), more repeat R, G, B, R, ... scaled by `3 / in_chans` (so `in_chans`
    a multiple of 3 computes on the image repeated what the kernel did on it)."""
    if in_chans == 1:
        return kernel.sum(axis=2, keepdims=True)
    cycled = np.take(kernel, np.arange(in_chans) % kernel.shape[2], axis=2)
    return cycled * np.float32(kernel.shape[2] / in_chans)


def channels_of(values: tuple[float, ...], in_chans: int) -> tuple[float, ...]:
    """Per-channel RGB statistics (a normalisation's mean or std) for the channels that
    `input_channels_adapted` makes: their mean for one, R, G, B, R, ... for more."""
    if in_chans == 1:
        return (sum(values) / len(values),)
    return tuple(values[i % len(values)] for i in range(in_chans))


def _permutation(leaf: str, ndim: int) -> tuple[int, ...] | None:
    """PyTorch -> ours: conv weights OIHW -> HWIO (depthwise `[c, 1, k, k]` -> `[k, k, 1, c]`),
    1-D ones OIW -> WIO (ECA's), dense weights `[out, in]` -> `[in, out]`; everything else as it
    is."""
    if leaf == "kernel" and ndim == 4:
        return (2, 3, 1, 0)
    if leaf == "kernel" and ndim == 3:
        return (2, 1, 0)
    if leaf == "kernel" and ndim == 2:
        return (1, 0)
    return None


def _view(leaf: str, got: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The PyTorch shape to view a source of shape `got` as, for a kernel of ours of `shape`
    written by the other kind of layer: a dense weight `[out, c * kh * kw]` as `[out, c, kh, kw]`
    for our convolution, a 1x1 convolution `[out, in, 1, 1]` as `[out, in]` for our dense layer.
    None when `got` needs no view, or none fits."""
    if leaf != "kernel" or len(shape) not in (2, 4) or len(got) == len(shape):
        return None
    torch_shape = (shape[-1], shape[-2], *shape[:-2])  # HWIO -> OIHW, [in, out] -> [out, in]
    dense = len(got) == 2 and got[0] == torch_shape[0] and math.prod(got) == math.prod(shape)
    return torch_shape if dense or got == (*torch_shape, 1, 1) else None


def plan(
    source_shapes: Mapping[str, tuple[int, ...]],
    target_shapes: Mapping[Path, tuple[int, ...]],
    layout: Layout,
    skip: Callable[[Path], bool] = lambda path: False,
    skip_sources: Callable[[str], bool] = lambda key: False,
    what: str = "the file",
    framework: Framework = TORCH,
    in_chans: int = RGB,
) -> list[Step]:
    """The steps filling every target not `skip`ped from the sources, each source used once;
    with `in_chans` other than 3, the convolution kernels that take the RGB image take one of
    `in_chans` channels instead (`input_channels_adapted`).

    Raises `WeightFileError` for a missing tensor, a shape mismatch, or unused tensors (besides
    the framework's `dropped` and `skip_sources`, e.g. a classifier that fine-tuning replaces).
    """
    steps, used = [], set()
    wanted = {
        path: framework.keys(layout(path[1:-1]), path[-1])
        for path in target_shapes
        if not skip(path)
    }
    for path, keys in wanted.items():
        shape = target_shapes[path]
        source = next((k for k in keys if k in source_shapes), keys[0])
        where = "/".join(path)
        if source not in source_shapes:
            _check_depth(source, source_shapes, [k[0] for k in wanted.values()], what, framework)
            raise WeightFileError(f"{what} has no tensor {source!r} for {where}")
        got = tuple(source_shapes[source])
        view, permutation = framework.layout(path[-1], got, tuple(shape))
        viewed = view or got
        moved = (
            tuple(viewed[i] for i in permutation)
            if permutation and len(viewed) == len(shape)
            else viewed
        )
        takes_image = (
            path[-1] == "kernel"
            and len(shape) == 4
            and moved == (*shape[:2], RGB, shape[3])
            and shape[2] == in_chans
        )
        if moved != tuple(shape) and not takes_image:
            raise WeightFileError(
                f"{what}'s {source!r} has shape {got}; {where} needs {tuple(shape)} "
                f"(a file for another configuration of the network?)"
            )
        steps.append(Step(path, source, permutation, view, in_chans if takes_image else None))
        used.add(source)
    unused = sorted(
        k
        for k in source_shapes
        if k not in used and not k.endswith(framework.dropped) and not skip_sources(k)
    )
    if unused:
        _check_depth(unused[0], source_shapes, [k[0] for k in wanted.values()], what, framework)
        shown = ", ".join(map(repr, unused[:3])) + (", ..." if len(unused) > 3 else "")
        raise WeightFileError(
            f"{len(unused)} tensor(s) of {what} fill no variable of this network: {shown} "
            "(a file for another architecture?)"
        )
    return steps


def _check_depth(
    key: str,
    source_keys: Collection[str],
    wanted: Collection[str],
    what: str,
    framework: Framework,
) -> None:
    """Raises `WeightFileError` naming the block counts where `key`, a tensor one side lacks,
    is in a numbered module (`layer1.4`) past the other side's count: a file for another
    depth. A key that both sides' blocks would hold (a block of another kind) is not."""
    ours, theirs = _block_counts(wanted, framework), _block_counts(source_keys, framework)
    parts = key.split(framework.separator)
    beyond = any(
        part.isdigit()
        and (prefix := framework.separator.join(parts[:i])) in ours
        and prefix in theirs
        and int(part) >= min(ours[prefix], theirs[prefix])
        for i, part in enumerate(parts[:-1])
    )
    differ = sorted(p for p in ours if p in theirs and ours[p] != theirs[p])
    if beyond and differ:
        counts = ", ".join(f"{p} {theirs[p]} vs {ours[p]}" for p in differ)
        raise WeightFileError(
            f"{what} is for a network of another depth (blocks in the file vs this network: "
            f"{counts})"
        )


def _block_counts(keys: Collection[str], framework: Framework) -> dict[str, int]:
    """How many numbered children each module has: `{'layer1': 3, ...}` of `layer1.0.conv1`,
    `layer1.1.conv1`, `layer1.2.conv1`."""
    children: dict[str, set[str]] = {}
    for key in keys:
        parts = key.split(framework.separator)
        for i, part in enumerate(parts[:-1]):
            if part.isdigit():
                children.setdefault(framework.separator.join(parts[:i]), set()).add(part)
    return {prefix: len(numbers) for prefix, numbers in children.items()}


def apply(steps: list[Step], tensors: Mapping[str, np.ndarray], variables: dict) -> dict:
    """`variables` (a nested dict; abstract leaves allowed where a step fills them) with each
    step's tensor in place, as float32 numpy arrays."""
    out = jax.tree.map(lambda leaf: leaf, variables)
    for step in steps:
        value = np.asarray(tensors[step.source], np.float32)
        if step.view:
            value = value.reshape(step.view)
        if step.permutation:
            value = np.ascontiguousarray(value.transpose(step.permutation))
        if step.in_chans is not None:
            value = input_channels_adapted(value, step.in_chans)
        node = out
        for key in step.target[:-1]:
            node = node[key]
        node[step.target[-1]] = value
    return out


def leaf_shapes(variables: Any) -> dict[Path, tuple[int, ...]]:
    """`{('params', 'conv_init', 'kernel'): (7, 7, 3, 64), ...}` of a variable tree."""
    return {
        tuple(k.key for k in path): tuple(leaf.shape)
        for path, leaf in jax.tree_util.tree_leaves_with_path(variables)
    }
