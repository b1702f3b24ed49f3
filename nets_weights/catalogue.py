"""The published weights that load into our networks, by name: `catalogue.tsv`.

`load_pretrained('resnet50.a1_in1k')` or a torchvision or Keras Applications URL needs to know,
before anything is downloaded, which `architectures.ARCHITECTURES` key the file loads as (Keras's
files name no architecture, and a file from a cache folder keeps only its basename), and which
hash Keras checks it with. tools/catalogue.py writes the table from timm's, torchvision's and
Keras's own sources, so that no name, URL or hash here was typed by hand.
"""

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from nets import names
from nets_weights.architectures import ARCHITECTURES

_FILE = Path(__file__).with_name("catalogue.tsv")


class Entry(NamedTuple):
    """One published weight file."""

    weights: str  # timm's pretrained name (the Hub repo `timm/<name>`), or the file's URL
    architecture: str  # the `ARCHITECTURES` key it loads as
    hash: str  # Keras's `md5:<hex>` / `sha256:<hex>`; '' where the name or the Hub checks it


@functools.cache
def _entries() -> tuple[Entry, ...]:
    lines = _FILE.read_text().splitlines()
    rows = [line.split("\t") for line in lines if line and not line.startswith("#")]
    return tuple(Entry(*row) for row in rows[1:])  # rows[0]: the column names


def entries() -> list[Entry]:
    """Every row of the catalogue, in its order (a new list: the table is read once)."""
    return list(_entries())


def closest(name: str) -> list[str]:
    """The catalogued weights' names (a Hub's, not URLs) closest to `name`, for one-line errors."""
    return names.closest(name, (e.weights for e in _entries() if not e.weights.startswith("http")))


def _basename(weights: str) -> str:
    """A URL's or a path's last part: `https://.../resnet18-f37072fd.pth`, or
    `~/.cache/torch/hub/checkpoints/resnet18-f37072fd.pth` -> `resnet18-f37072fd.pth`."""
    return re.split(r"[/\\]", weights.split("?", 1)[0])[-1]


@functools.cache
def _index() -> dict[str, Entry]:
    """Entries by name and, for files, by basename: a downloaded file in a cache folder is
    recognised by the name its source gave it (torchvision's carry their hash prefix)."""
    by_basename = {_basename(e.weights): e for e in _entries() if "/" in e.weights}
    return {**by_basename, **{e.weights: e for e in _entries()}}


def architecture_of(weights: str) -> str | None:
    """The `ARCHITECTURES` key the weights named `weights` load as: a timm name, a URL, or a
    file whose basename is a catalogued file's; None if the catalogue does not know them."""
    entry = _index().get(weights) or _index().get(_basename(weights))
    return entry.architecture if entry else None


def hash_of(url: str) -> tuple[str, str] | None:
    """`(algorithm, hex digest)` that Keras checks the file at `url` with (`('md5', ...)`),
    or None where the catalogue has no hash for it (timm's, torchvision's, MobileNet's)."""
    entry = _index().get(url)
    if entry is None or not entry.hash:
        return None
    algorithm, digest = entry.hash.split(":", 1)
    return algorithm, digest


def for_network(network: str, networks: Mapping[str, Any]) -> list[str]:
    """The names of the weights that load into our registry's `network`: those whose
    architecture's network is `network`, or a registry name bound to the same constructor
    (`networks` is `nets_factory.networks_map`: DeiT's weights load into our ViTs)."""
    ours = networks.get(network)

    def same(other: str) -> bool:
        return other == network or (ours is not None and networks.get(other) is ours)

    return [e.weights for e in _entries() if same(ARCHITECTURES[e.architecture].network)]
