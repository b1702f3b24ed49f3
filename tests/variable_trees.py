"""The committed snapshot of every network's variable tree (paths and shapes), and its format.

A checkpoint restores only into the tree it was saved from, so a refactoring of `nets/` must leave
every registered network's tree exactly as it was. `variable_trees.txt` holds one section per
distinct constructor (aliases share their partial): the nested collections and modules, one name
a line, indented; a module that holds only arrays is one line, `name: bias(64) kernel(3,3,64,64)`.
Siblings whose subtrees are identical are folded into `name = sibling`, so a stage of 36 equal
blocks costs 36 lines, not 36 subtrees.

To rewrite the snapshot after an intended change of a tree: `python -m tests.variable_trees
[NAME ...]` (only those networks' sections when named).
"""

import functools
import hashlib
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).with_name("variable_trees.txt")


def tree_lines(tree: Any, indent: int = 0) -> list[str]:
    """The folded, indented listing of a nested dict of arrays (or `ShapeDtypeStruct`s)."""
    lines, seen = [], {}
    pad = " " * indent
    for key in sorted(tree):
        value = tree[key]
        if not isinstance(value, dict):
            lines.append(f"{pad}{key} {_shape(value)}")
            continue
        if not any(isinstance(child, dict) for child in value.values()):  # a layer: one line
            leaves = " ".join(f"{name}{_shape(value[name])}" for name in sorted(value))
            lines.append(f"{pad}{key}: {leaves}")
            continue
        body = tree_lines(value, indent + 1)
        signature = hashlib.sha1("\n".join(line.strip() for line in body).encode()).hexdigest()
        if signature in seen:
            lines.append(f"{pad}{key} = {seen[signature]}")
        else:
            seen[signature] = key
            lines.append(f"{pad}{key}")
            lines.extend(body)
    return lines


def _shape(leaf: Any) -> str:
    return "(" + ",".join(map(str, leaf.shape)) + ")"


def load() -> dict[str, list[str]]:
    """The snapshot's sections: network name -> its listing."""
    return dict(_sections())


@functools.cache  # read once per process: 0.6 MB
def _sections() -> dict[str, list[str]]:
    sections, name = {}, None
    for line in SNAPSHOT.read_text().splitlines():
        if line.startswith("# "):
            name = line[2:]
            sections[name] = []
        elif name is not None and line:
            sections[name].append(line)
    return sections


def section(name: str) -> str:
    """The snapshot's section of the registry name `name`: its constructor's first name."""
    import nets_factory

    constructor = nets_factory.networks_map[name]
    return min(n for n, c in nets_factory.networks_map.items() if c is constructor)


def abstract(name: str) -> dict[str, Any]:
    """`name`'s variables at 1000 classes as abstract float32 arrays, read from the snapshot:
    what `jax.eval_shape` of its `init` gives (test_nets_factory checks that), without a trace."""
    import jax
    import jax.numpy as jnp

    tree: dict[str, Any] = {}
    for path, shape in leaf_shapes(section(name)).items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = jax.ShapeDtypeStruct(shape, jnp.float32)
    return tree


def leaf_shapes(name: str) -> dict[tuple[str, ...], tuple[int, ...]]:
    """`{('params', 'conv1', 'kernel'): (11, 11, 3, 64), ...}` of `name`'s snapshot section (as
    `nets_weights.convert.leaf_shapes` of its traced variables), its folded siblings unfolded."""
    shapes, subtrees = {}, {}  # subtrees: a module's path -> its leaves, relative to it
    stack: list[str] = []  # the path of the line being read
    for line in load()[name]:
        depth = len(line) - len(line.lstrip(" "))
        del stack[depth:]
        text = line.strip()
        if " = " in text:  # a sibling's copy
            key, sibling = text.split(" = ")
            copied = subtrees[(*stack, sibling)]
            _add(shapes, subtrees, (*stack, key), copied)
        elif ": " in text:  # a layer: its leaves on one line
            key, leaves = text.split(": ")
            parsed = dict(_leaf(leaf) for leaf in leaves.split(" "))
            _add(shapes, subtrees, (*stack, key), parsed)
        elif text.endswith(")"):  # a leaf of a module that also holds modules
            leaf, shape = _leaf(text.replace(" ", ""))
            _add(shapes, subtrees, tuple(stack), {leaf: shape})
        else:
            stack.append(text)
    return shapes


def _leaf(text: str) -> tuple[str, tuple[int, ...]]:
    name, shape = text[:-1].split("(")
    return name, tuple(int(n) for n in shape.split(",") if n)


def _add(shapes: dict, subtrees: dict, path: tuple[str, ...], leaves: dict) -> None:
    """Records `leaves` (relative paths) under the module at `path`, and in every ancestor's."""
    for relative, shape in leaves.items():
        relative = relative if isinstance(relative, tuple) else (relative,)
        shapes[(*path, *relative)] = shape
        for cut in range(len(path) + 1):
            subtrees.setdefault(path[:cut], {})[(*path[cut:], *relative)] = shape


def main(names: list[str]) -> None:
    """Rewrites the sections of `names` (default: every distinct network), keeping the others."""
    import jax
    import jax.numpy as jnp

    import nets_factory
    from tests.test_nets_factory import ALL_NETWORKS

    sections = load() if names and SNAPSHOT.exists() else {}
    for name in names or ALL_NETWORKS:
        fn = nets_factory.get_network_fn(name, num_classes=1000, is_training=True)
        size = fn.default_image_size
        images = jax.ShapeDtypeStruct((2, size, size, 3), jnp.float32)
        sections[name] = tree_lines(jax.eval_shape(fn.init, jax.random.key(0), images))
    out = ["Variable trees of every distinct network at 1000 classes; see tests/variable_trees.py"]
    for name in ALL_NETWORKS:
        out += ["", f"# {name}", *sections[name]]
    SNAPSHOT.write_text("\n".join(out) + "\n")
    print(f"wrote {SNAPSHOT} ({len(ALL_NETWORKS)} networks)")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
