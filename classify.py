"""Classifies image files with published ImageNet weights: the top classes of each, with
probabilities, using the weights' own preprocessing (resize, centre crop, mean/std).

    python classify.py --model=resnet50 --weights=~/weights/resnet50.a1_in1k photo.jpg
    python classify.py --model=resnet18 --weights=resnet18-f37072fd.pth --top=3 *.jpg

Weights are local files (nothing is downloaded): a Hugging Face / timm folder or its
`model.safetensors`, or a torchvision `.pth` (needs torch). Errors are one line on stderr.
"""

import sys

from absl import app, flags

_MODEL = flags.DEFINE_string("model", None, "Network or architecture name, e.g. resnet50.")
_WEIGHTS = flags.DEFINE_string("weights", None, "A weight file or a Hugging Face folder.")
_TOP = flags.DEFINE_integer("top", 5, "How many classes to print per image.")
flags.mark_flags_as_required(["model", "weights"])


def main(argv):
    if len(argv) < 2:
        raise app.UsageError("give one or more image files")
    import nets_factory
    from nets_weights import predict

    try:
        network_fn, variables = nets_factory.load_pretrained(_MODEL.value, _WEIGHTS.value)
        images = predict.read_images(argv[1:], network_fn.pretrained)
    except ValueError as e:
        print(f"classify.py: {e}", file=sys.stderr)
        sys.exit(2)
    for path, best in zip(
        argv[1:], predict.top_k(network_fn, variables, images, _TOP.value), strict=True
    ):
        print(path)
        for name, probability in best:
            print(f"  {100 * probability:6.2f}%  {name}")


if __name__ == "__main__":
    app.run(main)
