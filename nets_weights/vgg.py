"""timm's and torchvision's VGG state dicts, and torchvision's AlexNet, as our `nets.vgg` and
`nets.alexnet`.

Both libraries number the feature layers as torchvision's `nn.Sequential` does: every
convolution, BatchNorm, ReLU and max pool takes an index (`features.{n}`). Our convolutions are
Slim's `conv{stage}_{k}` (`bn{stage}_{k}` their BatchNorms), then `fc6`, `fc7`, `fc8`.

The head comes in two layouts. timm's VGG (`vgg11`.. `vgg19_bn`, the `tv_in1k` weights are
torchvision's, re-saved) holds `fc6`/`fc7` as convolutions (`pre_logits.fc1`
`[4096, 512, 7, 7]`, `pre_logits.fc2` `[4096, 4096, 1, 1]`) and the logits layer as a dense
`head.fc`; torchvision's holds all three as `Linear` (`classifier.0/3/6`, `classifier.0` over
the NCHW-flattened 7x7 map). `nets_weights.convert` views either as our convolutions; the file's
keys say which layout it has. AlexNet's is torchvision's (`classifier.1/4/6`).

Our VGG and AlexNet compute torchvision's functions (adaptive average pooling to the `fc6`
window, PyTorch's BatchNorm epsilon, 3x3 'SAME' = symmetric padding at stride 1). timm's VGG is
the same function up to 224 pixels (maps up to 7x7, pooled up to 7x7); on larger images it slides
`fc6` over the map and averages `fc7`'s, where torchvision average-pools the map to 7x7 first:
timm's layout loads with `larger_maps='slide'`, torchvision's with the default `'pool'`.
"""

from collections.abc import Sequence

from nets_weights.convert import Architecture, Layout

_TIMM_HEAD = {"fc6": "pre_logits.fc1", "fc7": "pre_logits.fc2", "fc8": "head.fc"}
_TORCHVISION_HEAD = {"fc6": "classifier.0", "fc7": "classifier.3", "fc8": "classifier.6"}
# torchvision's AlexNet: conv1 relu pool conv2 relu pool conv3 relu conv4 relu conv5 relu pool;
# classifier: dropout fc6 relu dropout fc7 relu fc8.
_ALEXNET = {
    **{f"conv{k}": f"features.{n}" for k, n in zip(range(1, 6), (0, 3, 6, 8, 10), strict=True)},
    "fc6": "classifier.1",
    "fc7": "classifier.4",
    "fc8": "classifier.6",
}


def vgg_layout(stage_sizes: Sequence[int], batch_norm: bool, head: dict[str, str]) -> Layout:
    """Our module paths -> torch prefixes: `features.{n}` counted as torchvision's `make_layers`
    appends them (conv, [BatchNorm], ReLU per convolution; a max pool per stage), then `head`."""
    names, n = dict(head), 0
    for stage, size in enumerate(stage_sizes, 1):
        for k in range(1, size + 1):
            names[f"conv{stage}_{k}"] = f"features.{n}"
            if batch_norm:
                names[f"bn{stage}_{k}"] = f"features.{n + 1}"
            n += 3 if batch_norm else 2
        n += 1  # the stage's max pool
    return lambda path: names[path[0]]


def _vgg(network: str) -> Architecture:
    def layout(head):
        return lambda module: vgg_layout(module.stage_sizes, module.batch_norm, head)

    torchvision = Architecture(
        network, {}, layout(_TORCHVISION_HEAD), head=("fc8",), source_head="classifier.6"
    )
    return Architecture(
        network,
        {"larger_maps": "slide"},
        layout(_TIMM_HEAD),
        head=("fc8",),
        source_head="head.fc",
        alternatives=(torchvision,),
    )


ARCHITECTURES = {
    # timm's names (and torchvision's), which are ours too.
    **{
        name: _vgg(name)
        for name in (
            "vgg11",
            "vgg13",
            "vgg16",
            "vgg19",
            "vgg11_bn",
            "vgg13_bn",
            "vgg16_bn",
            "vgg19_bn",
        )
    },
    # torchvision's alexnet (timm has none); Slim's alexnet_v2 is another network.
    "alexnet": Architecture(
        "alexnet", {}, lambda module: lambda path: _ALEXNET[path[0]], ("fc8",), "classifier.6"
    ),
}
