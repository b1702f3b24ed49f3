"""The committed snapshots of every network's variable tree (paths and shapes) and end points,
and their formats.

A checkpoint restores only into the tree it was saved from, so a refactoring of `nets/` must leave
every registered network's tree exactly as it was. `variable_trees.txt` holds one section per
distinct constructor (aliases share their partial): the nested collections and modules, one name
a line, indented; a module that holds only arrays is one line, `name: bias(64) kernel(3,3,64,64)`.
Siblings whose subtrees are identical are folded into `name = sibling`, so a stage of 36 equal
blocks costs 36 lines, not 36 subtrees.

`end_points.txt` holds, a line each, the end points of each distinct network's training graph
(auxiliary heads' included) in the order the network makes them, for one image at its default
size: `name: stem(1,112,112,64) block1(1,56,56,256) ...`. Tests of a family's end points read
them here instead of tracing a full-size network again.

To rewrite both after an intended change of a tree or of the end points: `python -m
tests.variable_trees [NAME ...]` (only those networks' entries when named).
"""

import functools
import hashlib
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).with_name("variable_trees.txt")
END_POINTS = Path(__file__).with_name("end_points.txt")


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


def end_points(name: str, train: bool = False) -> dict[str, tuple[int, ...]]:
    """`{point: shape}` of registry name `name` at 1000 classes, for one image at its default
    size, in the network's order, read from the snapshot: training's end points, or (`train`
    False) evaluation's, which are the same but the auxiliary heads' (test_nets_factory checks
    both against traces)."""
    points = _end_point_lines()[section(name)]
    return {p: s for p, s in points.items() if train or not p.startswith("aux")}


@functools.cache
def _end_point_lines() -> dict[str, dict[str, tuple[int, ...]]]:
    networks = {}
    for line in END_POINTS.read_text().splitlines()[1:]:
        name, points = line.split(": ")
        networks[name] = dict(_leaf(point) for point in points.split(" "))
    return networks


def end_point_line(name: str, points: dict[str, tuple[int, ...]]) -> str:
    """`end_points.txt`'s line of network `name` with end points `{point: shape}`."""
    return f"{name}: " + " ".join(f"{p}({','.join(map(str, s))})" for p, s in points.items())


def main(names: list[str]) -> None:
    """Rewrites the entries of `names` (default: every distinct network), keeping the others."""
    import nets_factory
    from tests.test_nets_factory import ALL_NETWORKS, abstract_images, traced_init

    sections = load() if names and SNAPSHOT.exists() else {}
    points = dict(_end_point_lines()) if names and END_POINTS.exists() else {}
    for name in names or ALL_NETWORKS:
        fn = nets_factory.get_network_fn(name, num_classes=1000, is_training=True)
        variables, points[name], _, _ = traced_init(fn, abstract_images(fn, batch=1), replay=False)
        sections[name] = tree_lines(variables)
    out = ["Variable trees of every distinct network at 1000 classes; see tests/variable_trees.py"]
    for name in ALL_NETWORKS:
        out += ["", f"# {name}", *sections[name]]
    SNAPSHOT.write_text("\n".join(out) + "\n")
    lines = ["End points of every distinct network's training graph; see tests/variable_trees.py"]
    lines += [end_point_line(name, points[name]) for name in ALL_NETWORKS]
    END_POINTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {SNAPSHOT} and {END_POINTS} ({len(ALL_NETWORKS)} networks)")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
