"""Classifies image files with published ImageNet weights: the top classes of each, with
probabilities, using the weights' own preprocessing (resize, centre crop, mean/std)
(`nets-classify` when installed, `python classify.py` in a checkout).

    nets-classify --weights=resnet50.a1_in1k photo.jpg          # timm's name: from the Hub
    nets-classify --model=resnet50 --weights=~/weights/resnet50.a1_in1k photo.jpg
    nets-classify --model=resnet18 --weights=resnet18-f37072fd.pth --top=3 *.jpg
    nets-classify --weights=resnet50.a1_in1k photos/                # its images, sub-folders too

Weights are a Hugging Face / timm folder or its `model.safetensors`, a torchvision `.pth` (read
without torch), a Keras `.h5` (needs h5py: `pip install 'jax-nets-factory[keras]'`), or a name
or URL that is downloaded once into its standard cache (a timm name like `resnet50.a1_in1k`,
`hf-hub:timm/resnet50.a1_in1k`: needs huggingface_hub, `pip install 'jax-nets-factory[hub]'`; a
torchvision URL). Errors are one line on stderr; a file that cannot be read is named, after the
results of the others, and the exit status is 1.
"""

import os
import sys

from absl import flags

from nets_cli import common

_MODEL = flags.DEFINE_string(
    "model", None, "The network, where the weights do not say (a .pth file), e.g. resnet50."
)
_WEIGHTS = flags.DEFINE_string(
    "weights", None, "Published weights: a file, a Hub folder, a Hub name or a URL."
)
_TOP = flags.DEFINE_integer("top", 5, "How many classes to print per image.", lower_bound=1)


def main(argv: list[str]) -> None:
    common.quiet_unless_asked()
    from nets_training.errors import UserError

    try:
        paths = with_folders_expanded(argv[1:])
        common.require(
            _WEIGHTS,
            "published weights (a file, a Hub folder, a Hub name or a URL), e.g. "
            "--weights=resnet50.a1_in1k",
        )
        if not paths:
            raise UserError("give one or more image files, e.g. photo.jpg or *.jpg")
        if not any(os.path.exists(path) for path in paths):  # before weights are downloaded
            raise UserError(f"no such file: {', '.join(paths)} (nothing to classify)")
        import nets_factory
        from nets_weights import predict

        network_fn, variables = nets_factory.load_pretrained(_MODEL.value, _WEIGHTS.value)
        results = predict.classify_files(network_fn, variables, paths, _TOP.value)
    except (UserError, ValueError) as e:
        common.fail(str(e), 2)
    unread = []
    for path, result in zip(paths, results, strict=True):
        if isinstance(result, ValueError):  # the image's one line, which names it
            unread.append(str(result))
            continue
        print(path)
        for name, probability in result:
            print(f"  {100 * probability:6.2f}%  {name}")
    for message in unread:
        print(f"{common.program()}: {message}", file=sys.stderr)
    sys.exit(1 if unread else 0)


# The images a folder given is read for (what PIL decodes, by the names cameras and tools write).
FOLDER_IMAGES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")


def with_folders_expanded(paths: list[str]) -> list[str]:
    """`paths` with each folder replaced by the images under it (`FOLDER_IMAGES`, sorted)."""
    from nets_training.errors import UserError

    expanded = []
    for path in paths:
        if not os.path.isdir(path):
            expanded.append(path)
            continue
        found = sorted(
            os.path.join(root, name)
            for root, _, names in os.walk(path)
            for name in names
            if os.path.splitext(name)[1].lower() in FOLDER_IMAGES
        )
        if not found:
            raise UserError(f"{path}: a folder with no image files ({', '.join(FOLDER_IMAGES)})")
        expanded += found
    return expanded


def run() -> None:
    """The `nets-classify` console script."""
    common.run(main, __name__)


if __name__ == "__main__":
    run()
