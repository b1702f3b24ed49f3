"""Published weights remember the constructor fields they were trained with (`padding=
'SYMMETRIC'`, `bn_epsilon=1e-5`, ...), so that a network built with other values refuses them
instead of silently computing another function.

`load_pretrained` returns its network built right; the danger is the next line of a notebook,
where the same variables meet a `get_network_fn` network of the default conventions (timm's
ResNet-50 in our 'SAME' padding: block4's maps 30% off, no error).

The variables stay a plain dict (so `jax.tree.map` beside any other variables, optax, orbax and
flax's serialization see what they always see): what is remembered is their arrays, weakly, for
as long as they live. A new array (an optimizer's update, `jnp.array(x)`) is no longer the
published weights, and is not checked; neither are traced values inside `jax.jit`.
"""

import weakref
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax


class Origin(NamedTuple):
    """Whose weights an array holds, and the constructor fields they need."""

    source: str
    conventions: dict[str, Any]


# id(array) -> (a weak reference to it, its origin); an entry leaves when its array is freed.
_ORIGINS: dict[int, tuple[weakref.ref, Origin]] = {}


def mark(variables: Mapping[str, Any], source: str, conventions: Mapping[str, Any]) -> None:
    """Remembers that `variables` hold `source`'s published weights, which need `conventions`."""
    array = _probe(variables)
    if array is None:
        return
    key = id(array)
    forget = lambda _: _ORIGINS.pop(key, None)  # noqa: E731
    _ORIGINS[key] = (weakref.ref(array, forget), Origin(source, dict(conventions)))


def origin(variables: Any) -> Origin | None:
    """The origin `mark` recorded for `variables`, or None."""
    array = _probe(variables)
    entry = _ORIGINS.get(id(array)) if array is not None else None
    return entry[1] if entry is not None and entry[0]() is array else None


def check(variables: Any, module: Any, network: str) -> None:
    """Raises `ValueError` when `variables` hold published weights that need other constructor
    fields than those `module` (the network `network`) was built with."""
    if (found := origin(variables)) is not None:
        check_fields(found.source, found.conventions, module, network)


def check_fields(source: str, conventions: Mapping[str, Any], module: Any, network: str) -> None:
    """Raises `ValueError` when `module` was built with other values of `conventions`, the
    constructor fields `source`'s weights were trained with."""
    differ = {
        field: value
        for field, value in conventions.items()
        if _normal(getattr(module, field, value)) != _normal(value)
    }
    if differ:
        theirs = ", ".join(f"{field}={value!r}" for field, value in differ.items())
        ours = ", ".join(f"{field}={getattr(module, field)!r}" for field in differ)
        raise ValueError(
            f"{source}'s published weights were trained with {theirs}; this {network} network "
            f"has {ours} and would compute another function with them: use the network_fn "
            f"load_pretrained returned, or get_network_fn({network!r}, ..., {theirs})"
        )


def _probe(variables: Any) -> Any:
    """The array that stands for `variables`: the first parameter (a concrete one)."""
    params = variables.get("params") if isinstance(variables, Mapping) else None
    leaves = jax.tree.leaves(params) if params is not None else []
    if not leaves or isinstance(leaves[0], jax.core.Tracer):
        return None
    return leaves[0]


def _normal(value: Any) -> Any:
    """Lists and tuples alike (a YAML config gives lists where the registry has tuples)."""
    if isinstance(value, list | tuple):
        return tuple(_normal(v) for v in value)
    return value
