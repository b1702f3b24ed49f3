"""The names closest to a mistyped one, for one-line errors that name them instead of a list of
hundreds (networks, architectures with published weights, published weights)."""

import difflib
from collections.abc import Iterable


def closest(name: str, names: Iterable[str], n: int = 3) -> list[str]:
    """Up to `n` of `names` that begin with `name` ('vit_tiny': vit_tiny_patch16_224 ...),
    else difflib's closest."""
    names = sorted(names)
    begun = [other for other in names if other.startswith(name)][:n]
    return begun or difflib.get_close_matches(name, names, n=n, cutoff=0.6)
