"""The real published files of docs/pretrained.md's table, loaded here and compared with their
publisher's code: the logits of `tools/fixtures_torch_files.py --out DIR` (his code, his files,
the 10,000 CIFAR-10 test images) against ours, and both accuracies against the published one.

    python tools/real_files.py DIR
"""

import argparse
import time
from pathlib import Path

import jax
import numpy as np

import nets_factory

# Idelbayev's README: test error of each file (and `best_prec1` inside each file).
PUBLISHED_ERROR = {"resnet20": 8.27, "resnet32": 7.37, "resnet44": 6.90, "resnet56": 6.61}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="tools/fixtures_torch_files.py's --out")
    folder = parser.parse_args().folder
    test = np.load(folder / "cifar10_test.npz")
    images, labels = test["images"], test["labels"]
    print("| file | size | max rel. logit error | top-1 ours | top-1 reference | published |")
    print("|---|---|---|---|---|---|")
    for path in sorted(folder.glob("*.th")):
        start = time.perf_counter()
        net_fn, variables = nets_factory.load_pretrained(None, path)
        info = net_fn.pretrained
        mean, std = np.asarray(info.mean, np.float32), np.asarray(info.std, np.float32)
        apply = jax.jit(lambda v, x, net_fn=net_fn: net_fn.apply(v, x)[0])
        logits = np.concatenate(
            [
                np.asarray(apply(variables, (images[i : i + 500] / np.float32(255) - mean) / std))
                for i in range(0, len(images), 500)
            ]
        )
        reference = np.load(folder / path.name.replace(".th", ".logits.npy"))
        error = np.abs(logits - reference).max() / np.abs(reference).max()
        ours = 100 * np.mean(logits.argmax(-1) == labels)
        theirs = 100 * np.mean(reference.argmax(-1) == labels)
        published = 100 - PUBLISHED_ERROR[info.source]
        size = f"{path.stat().st_size / 2**20:.1f} MiB"
        print(
            f"| {path.name} | {size} | {error:.1e} | {ours:.2f}% | {theirs:.2f}% | "
            f"{published:.2f}% | ({time.perf_counter() - start:.0f} s)"
        )


if __name__ == "__main__":
    main()
