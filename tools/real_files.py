"""The real files of docs/pretrained.md's table, loaded here and compared with their publisher's
code: the logits of `tools/fixtures_torch_files.py --out DIR` (his code, the files, the CIFAR-10
test images) against ours, and both accuracies against the one each file records.

    python tools/real_files.py DIR
"""

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np

import nets_factory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="tools/fixtures_torch_files.py's --out")
    folder = parser.parse_args().folder
    test = np.load(folder / "cifar10_test.npz")
    images, labels = test["images"], test["labels"]
    files = json.loads((folder / "files.json").read_text())
    print(f"{len(images)} test images")
    print("| file | size | max rel. logit error | top-1 ours | reference's | recorded |")
    print("|---|---|---|---|---|---|")
    for name, about in files.items():
        path = folder / name
        start = time.perf_counter()
        net_fn, variables = nets_factory.load_pretrained(about["network"], path)
        info = net_fn.pretrained
        mean, std = np.asarray(info.mean, np.float32), np.asarray(info.std, np.float32)
        apply = jax.jit(lambda v, x, net_fn=net_fn: net_fn.apply(v, x)[0])
        logits = np.concatenate(
            [
                np.asarray(apply(variables, (images[i : i + 500] / np.float32(255) - mean) / std))
                for i in range(0, len(images), 500)
            ]
        )
        reference = np.load(folder / f"{name}.logits.npy")
        error = np.abs(logits - reference).max() / np.abs(reference).max()
        ours = 100 * np.mean(logits.argmax(-1) == labels)
        theirs = 100 * np.mean(reference.argmax(-1) == labels)
        size = f"{path.stat().st_size / 2**20:.1f} MiB"
        print(
            f"| {about['repository']} `{about['path']}` | {size} | {error:.1e} | {ours:.2f}% | "
            f"{theirs:.2f}% | {about['best_prec1']:.2f}% | ({time.perf_counter() - start:.0f} s)"
        )


if __name__ == "__main__":
    main()
