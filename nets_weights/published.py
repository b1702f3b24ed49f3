"""Variables holding published weights carry the constructor fields those weights were trained
with (`padding='SYMMETRIC'`, `bn_epsilon=1e-5`, ...), so that a network built with other values
refuses them instead of silently computing another function.

`load_pretrained` returns its network built right; the danger is the next line of a notebook,
where the same variables meet a `get_network_fn` network of the default conventions (timm's
ResNet-50 in our 'SAME' padding: block4's maps 30% off, no error).
"""

from collections.abc import Iterable, Mapping
from typing import Any

import jax
from flax import serialization


@jax.tree_util.register_pytree_with_keys_class
class PublishedVariables(dict):
    """A network's variables (`{'params': ..., 'batch_stats': ...}`, a dict as `init` returns)
    holding `source`'s published weights, which need the constructor fields `conventions`.

    A pytree node: `jax.tree.map`, `jax.jit` and `jax.device_put` keep both attributes; a new
    dict built from its items (`dict(variables)`, `{**variables}`) is plain variables again, as
    `jax.tree.map` over it and plain variables together needs."""

    def __init__(
        self,
        variables: Mapping[str, Any] | Iterable[tuple[str, Any]],
        source: str,
        conventions: Mapping[str, Any],
    ):
        super().__init__(variables)
        self.source = source
        self.conventions = dict(conventions)

    def tree_flatten_with_keys(self) -> tuple[list, tuple]:
        keys = tuple(sorted(self))
        children = [(jax.tree_util.DictKey(key), self[key]) for key in keys]
        return children, (keys, self.source, tuple(sorted(self.conventions.items())))

    @classmethod
    def tree_unflatten(cls, aux: tuple, children: Iterable[Any]) -> "PublishedVariables":
        keys, source, conventions = aux
        return cls(zip(keys, children, strict=True), source, dict(conventions))

    def __repr__(self) -> str:
        return f"PublishedVariables({self.source}, {dict(self)!r})"


def _state_dict(variables: PublishedVariables) -> dict[str, Any]:
    return {key: serialization.to_state_dict(value) for key, value in variables.items()}


def _restored(target: PublishedVariables, state: dict[str, Any]) -> PublishedVariables:
    restored = {key: serialization.from_state_dict(target[key], state[key]) for key in target}
    return PublishedVariables(restored, target.source, target.conventions)


# `flax.serialization.to_bytes(variables)` and `from_bytes(variables, data)`, as for a dict.
serialization.register_serialization_state(PublishedVariables, _state_dict, _restored)


def check(variables: Any, module: Any, network: str) -> None:
    """Raises `ValueError` when `variables` hold published weights that need other constructor
    fields than those `module` (the network `network`) was built with."""
    if isinstance(variables, PublishedVariables):
        check_fields(variables.source, variables.conventions, module, network)


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


def _normal(value: Any) -> Any:
    """Lists and tuples alike (a YAML config gives lists where the registry has tuples)."""
    if isinstance(value, list | tuple):
        return tuple(_normal(v) for v in value)
    return value
