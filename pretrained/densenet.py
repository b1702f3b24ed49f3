"""torchvision's and timm's DenseNet state dicts, as our `nets.densenet`.

Both libraries' keys are torchvision's module paths under `features`: `features.conv0`,
`features.norm0`, `features.denseblock{b}.denselayer{l}.norm1` / `conv1` / `norm2` / `conv2`,
`features.transition{b}.norm` / `conv`, `features.norm5`, then `classifier`; ours are the same
paths without `features` (timm's `densenet121.tv_in1k` .. `densenet201.tv_in1k` are
torchvision's weights re-saved, `densenet121.ra_in1k` timm's own).

torchvision's `.pth` downloads were saved before PyTorch allowed dots in module names: their
dense layers' keys read `denselayer1.norm.1.weight` for `denselayer1.norm1.weight` (and
`relu.1`, `conv.1`, ... likewise). torchvision renames them when it loads such a file; `rename`
does the same here, so either spelling loads.
"""

import re
from collections.abc import Collection

from pretrained.convert import Architecture, Layout

_OLD_KEY = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))\.([12])\.(\w+)$")


def rename(keys: Collection[str]) -> dict[str, str]:
    """torchvision's old `denselayer{l}.norm.1.weight` keys -> `denselayer{l}.norm1.weight`;
    other keys as they are."""
    return {key: _OLD_KEY.sub(r"\1\2.\3", key) for key in keys}


def layout(module) -> Layout:
    """Our module paths -> the libraries' prefixes: `features.` before all but the classifier."""
    del module
    return lambda path: ".".join(path if path == ("classifier",) else ("features", *path))


def _architecture(network: str) -> Architecture:
    # The function is torchvision's at our defaults (symmetric padding, PyTorch's epsilon).
    return Architecture(
        network, {}, layout, head=("classifier",), source_head="classifier", rename=rename
    )


# torchvision's names, which are timm's and ours too.
ARCHITECTURES = {
    name: _architecture(name)
    for name in ("densenet121", "densenet161", "densenet169", "densenet201")
}
