"""Published weights carry the constructor fields they were trained with (`padding=
'SYMMETRIC'`, `bn_epsilon=1e-5`, ...), so that a network built with other values refuses them
instead of silently computing another function.

`load_pretrained` returns its network built right; the danger is the next line of a notebook,
where the same variables meet a `get_network_fn` network of the default conventions (timm's
ResNet-50 in our 'SAME' padding: block4's maps 30% off, no error).

The fields live in the variables' tree structure, which is what every copy keeps: a
`conventions` collection of empty dicts, one per field, named `field=value`
(`{'params': ..., 'batch_stats': ..., 'conventions': {"padding='SYMMETRIC'": {}}}`). It has no
leaves, so `jax.jit` (the structure is static: the check runs while tracing), `jax.tree.map`,
flax's serialization, orbax and optax carry it unchanged and never train it. Variables without
it (`init`'s, a training run's) are not checked; the network's layers never see it.
"""

import ast
from collections.abc import Mapping
from typing import Any

COLLECTION = "conventions"


def mark(variables: Mapping[str, Any], conventions: Mapping[str, Any]) -> dict[str, Any]:
    """`variables` with the `conventions` collection naming the constructor fields their
    weights need (no collection when they need none)."""
    if not conventions:
        return dict(variables)
    names = {f"{field}={value!r}": {} for field, value in conventions.items()}
    return {**variables, COLLECTION: names}


def conventions_of(variables: Any) -> dict[str, Any]:
    """The constructor fields `variables`' `conventions` collection names ({} without one)."""
    names = variables.get(COLLECTION) if isinstance(variables, Mapping) else None
    return dict(_field(name) for name in names or ())


def without_mark(variables: Any) -> Any:
    """`variables` without the `conventions` collection, for the network's layers."""
    if isinstance(variables, Mapping) and COLLECTION in variables:
        return {k: v for k, v in variables.items() if k != COLLECTION}
    return variables


def check(variables: Any, module: Any, network: str) -> None:
    """Raises `ValueError` when `variables` hold published weights that need other constructor
    fields than those `module` (the network `network`) was built with."""
    if found := conventions_of(variables):
        check_fields(
            f"these published variables (their {COLLECTION!r} collection)", found, module, network
        )


def check_fields(whose: str, conventions: Mapping[str, Any], module: Any, network: str) -> None:
    """Raises `ValueError` when `module` was built with other values of `conventions`, the
    constructor fields the weights (`whose`: "resnet50.a1_in1k's published weights") were
    trained with."""
    differ = {
        field: value
        for field, value in conventions.items()
        if _normal(getattr(module, field, value)) != _normal(value)
    }
    if differ:
        theirs = ", ".join(f"{field}={value!r}" for field, value in differ.items())
        ours = ", ".join(f"{field}={getattr(module, field)!r}" for field in differ)
        raise ValueError(
            f"{whose} were trained with {theirs}; this {network} network "
            f"has {ours} and would compute another function with them: use the network_fn "
            f"load_pretrained returned, or get_network_fn({network!r}, ..., {theirs})"
        )


def _field(name: str) -> tuple[str, Any]:
    """`('padding', 'SYMMETRIC')` from a collection entry's name `"padding='SYMMETRIC'"`."""
    field, _, value = name.partition("=")
    try:
        return field, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise ValueError(
            f"the variables' {COLLECTION!r} collection has {name!r}, not a field=value entry "
            f"that published weights write (e.g. \"padding='SYMMETRIC'\")"
        ) from None


def _normal(value: Any) -> Any:
    """Lists and tuples alike (a YAML config gives lists where the registry has tuples)."""
    if isinstance(value, list | tuple):
        return tuple(_normal(v) for v in value)
    return value
