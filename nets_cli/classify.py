"""Classifies image files with published ImageNet weights: the top classes of each, with
probabilities, using the weights' own preprocessing (resize, centre crop, mean/std)
(`nets-classify` when installed, `python classify.py` in a checkout).

    nets-classify --weights=resnet50.a1_in1k photo.jpg          # timm's name: from the Hub
    nets-classify --model=resnet50 --weights=~/weights/resnet50.a1_in1k photo.jpg
    nets-classify --model=resnet18 --weights=resnet18-f37072fd.pth --top=3 *.jpg

Weights are a Hugging Face / timm folder or its `model.safetensors`, a torchvision `.pth` (needs
torch), a Keras `.h5`, or a name or URL that is downloaded once into its standard cache (a timm
name like `resnet50.a1_in1k`, `hf-hub:timm/resnet50.a1_in1k`, a torchvision URL). Errors are
one line on stderr.
"""

import sys

from absl import app, flags

from nets_cli import common

_MODEL = flags.DEFINE_string(
    "model", None, "The network, where the weights do not say (a .pth file), e.g. resnet50."
)
_WEIGHTS = flags.DEFINE_string(
    "weights", None, "Published weights: a file, a Hub folder, a Hub name or a URL."
)
_TOP = flags.DEFINE_integer("top", 5, "How many classes to print per image.")
flags.mark_flags_as_required(["weights"])


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise app.UsageError("give one or more image files")
    common.quiet_unless_asked()
    import nets_factory
    from nets_weights import predict

    try:
        network_fn, variables = nets_factory.load_pretrained(_MODEL.value, _WEIGHTS.value)
        images = predict.read_images(argv[1:], network_fn.pretrained)
    except ValueError as e:
        print(f"{common.program()}: {e}", file=sys.stderr)
        sys.exit(2)
    for path, best in zip(
        argv[1:], predict.top_k(network_fn, variables, images, _TOP.value), strict=True
    ):
        print(path)
        for name, probability in best:
            print(f"  {100 * probability:6.2f}%  {name}")


def run() -> None:
    """The `nets-classify` console script."""
    common.run(main, __name__)


if __name__ == "__main__":
    run()
