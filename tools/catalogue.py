"""Writes nets_weights/catalogue.tsv: every published weight file that loads into one of
`nets_weights.architectures.ARCHITECTURES`, read from its source's own code, never typed in.

- timm: each pretrained name (`resnet50.a1_in1k`) whose `hf_hub_id` is `timm/<name>`, from
  `timm.list_pretrained()` run in a separate venv (timm and torch stay out of the project's).
- torchvision: the `url` of each member of a builder's Weights enum, as
  `get_model_weights(name)` lists them, read from `torchvision/models/**/*.py` (the CUDA
  wheel's torchvision does not import beside a CPU torch; its source needs nothing).
- Keras Applications: the ImageNet file with the top of each model, its URL and the
  `file_hash` Keras checks it with, read from the `applications/*.py` modules.
- Idelbayev's CIFAR-10 ResNets (github.com/akamaster/pytorch_resnet_cifar10): the files its
  README links, `pretrained_models/resnet20-12fca82f.th` ... (torch.hub's sha256 prefix in the
  name), read from a checkout's README.md (`--akamaster-readme`).

Run by hand from the repository root, in the project's venv, when a source publishes weights:

    python3 -m venv /tmp/timmenv && /tmp/timmenv/bin/pip install torch==2.13.0 numpy \
        safetensors && /tmp/timmenv/bin/pip install --no-deps timm
    pip download --no-deps torchvision==0.29.1 -d /tmp/tv
    python -m zipfile -e /tmp/tv/torchvision-*.whl /tmp/tv
    git -C KERAS_CHECKOUT archive HEAD keras/src/applications keras/src/version.py \
        | tar -x -C /tmp/keras
    git -C TF_KERAS_CHECKOUT archive HEAD tf_keras/applications tf_keras/__init__.py \
        | tar -x -C /tmp/tf_keras
    python tools/catalogue.py --timm-python /tmp/timmenv/bin/python \
        --torchvision /tmp/tv/torchvision/models \
        --keras /tmp/keras/keras/src/applications /tmp/tf_keras/tf_keras/applications

Keras 3 has no RegNet: tf-keras's modules give those; where both have a module, their files
must agree. timm is imported with /work/shared/tools's `timm_compat` (set `--timm-tools`).
A source left out of the command keeps its rows of the current table:

    python tools/catalogue.py --akamaster-readme README.md   # that source's rows only
"""

import argparse
import ast
import json
import os
import re
import subprocess
from pathlib import Path

from nets_weights.architectures import ARCHITECTURES, file_architecture

OUT = Path(__file__).parents[1] / "nets_weights" / "catalogue.tsv"

# Printed by the timm venv's python: its version, then one JSON row per pretrained name.
_TIMM_SCRIPT = """
import json
from timm_compat import import_timm
timm = import_timm()
print(json.dumps(timm.__version__))
for name in timm.list_pretrained():
    cfg = timm.models.get_pretrained_cfg(name)
    print(json.dumps([name, cfg.architecture, cfg.tag, cfg.hf_hub_id, cfg.num_classes]))
"""

# Keras's MobileNet files come at every size it accepts (V1: 128-224, V2: 96-224), but V2's
# alpha 1.4 at 224 only, the one size of the TF-Slim checkpoints Keras converted
# (tensorflow/models research/slim/nets/mobilenet/README.md); Keras checks no hash of either.
_V1_ROWS, _V2_ROWS = (128, 160, 192, 224), (96, 128, 160, 192, 224)
_V2_ALPHAS = {"0.35": _V2_ROWS, "1.0": _V2_ROWS, "1.4": (224,)}
_REGNETS = ("004", "008", "016", "032", "080", "160")
# Each Keras Applications module: its files with the top, named as the module names them
# (`mobilenet_%s_%d_tf.h5`, `f"..._{float(alpha)}_{rows}.h5"`, `name + ".h5"`), -> our key.
KERAS = {
    "mobilenet": {
        f"mobilenet_{alpha}_{rows}_tf.h5": f"keras_mobilenet_{alpha}"
        for alpha in ("1_0", "7_5", "5_0", "2_5")
        for rows in _V1_ROWS
    },
    "mobilenet_v2": {
        f"mobilenet_v2_weights_tf_dim_ordering_tf_kernels_{alpha}_{rows}.h5": (
            f"keras_mobilenet_v2_{alpha.replace('.', '_')}"
        )
        for alpha, sizes in _V2_ALPHAS.items()
        for rows in sizes
    },
    "inception_v3": {"inception_v3_weights_tf_dim_ordering_tf_kernels.h5": "keras_inception_v3"},
    "inception_resnet_v2": {
        "inception_resnet_v2_weights_tf_dim_ordering_tf_kernels.h5": "keras_inception_resnet_v2"
    },
    "nasnet": {"NASNet-mobile.h5": "keras_nasnet_mobile", "NASNet-large.h5": "keras_nasnet_large"},
    "densenet": {
        f"densenet{n}_weights_tf_dim_ordering_tf_kernels.h5": f"keras_densenet{n}"
        for n in (121, 169, 201)
    },
    "efficientnet": {f"efficientnetb{i}.h5": f"keras_efficientnet_b{i}" for i in range(8)},
    "efficientnet_v2": {f"efficientnetv2-{v}.h5": f"keras_efficientnetv2_{v}" for v in "sml"},
    "convnext": {
        f"convnext_{size}.h5": f"keras_convnext_{size}"
        for size in ("tiny", "small", "base", "large")
    },
    "regnet": {f"regnet{k}{n}.h5": f"keras_regnet{k}_{n}" for k in "xy" for n in _REGNETS},
}


def _package(directory: Path) -> str:
    """`name version` of the package whose sources `directory` holds (`torchvision/models`,
    `keras/src/applications`), from its `__version__`."""
    for package in directory.parents[:2]:
        for file in (package / "version.py", package / "__init__.py"):
            found = file.exists() and re.search(r"__version__ = ['\"](.+?)['\"]", file.read_text())
            if found:
                name = package.parent.name if package.name == "src" else package.name
                return f"{name} {found.group(1)}"
    return f"{directory} (no version found)"


def timm_rows(python: str, tools: str) -> tuple[str, list[tuple[str, str, str]]]:
    """timm's version, and its Hub weights that load into one of our architectures (those
    with a classifier, whose class count `load_pretrained` reads, and the features of the
    architectures that publish them: `Architecture.headless`, DINOv2's)."""
    lines = subprocess.run(
        [python, "-c", _TIMM_SCRIPT],
        env={**os.environ, "PYTHONPATH": tools},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    rows = []
    for name, arch, tag, hub_id, num_classes in map(json.loads, lines[1:]):
        key = file_architecture({"architecture": arch, "pretrained_cfg": {"tag": tag}})
        loads = key in ARCHITECTURES and (num_classes or ARCHITECTURES[key].headless)
        if loads and hub_id == f"timm/{name}":
            rows.append((name, key, ""))
    return json.loads(lines[0]), rows


def torchvision_rows(models: Path) -> list[tuple[str, str, str]]:
    """Each registered builder's Weights enum (its `weights` annotation), its members' urls."""
    urls, builders = {}, {}
    for path in sorted(models.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):  # `IMAGENET1K_V1 = Weights(url=..., ...)`
                urls[node.name] = [
                    kw.value.value
                    for item in node.body
                    if isinstance(item, ast.Assign) and isinstance(item.value, ast.Call)
                    for kw in item.value.keywords
                    if kw.arg == "url"
                ]
            elif isinstance(node, ast.FunctionDef):
                register = [d for d in node.decorator_list if "register_model" in ast.unparse(d)]
                weights = [a for a in node.args.kwonlyargs if a.arg == "weights"]
                if register and weights:
                    named = [kw.value.value for kw in register[0].keywords if kw.arg == "name"]
                    enums = re.findall(r"\w+_Weights", ast.unparse(weights[0].annotation))
                    builders[named[0] if named else node.name] = enums[-1]
    return [
        (url, name, "")
        for name, enum in builders.items()
        if name in ARCHITECTURES
        for url in urls[enum]
    ]


_STRING_EXPRESSION = (
    ast.Expression,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.BinOp,
    ast.Add,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.Dict,
    ast.Tuple,
)


def _evaluate(node: ast.expr, namespace: dict):
    """A string, tuple or dict expression of constants and `namespace`'s names (Keras's paths
    and hash tables); anything else (a layer, a call, a subscript) raises `ValueError`."""
    expression = ast.Expression(node)
    if not all(isinstance(n, _STRING_EXPRESSION) for n in ast.walk(expression)):
        raise ValueError(ast.unparse(node))
    try:
        return eval(compile(expression, "<keras>", "eval"), {"__builtins__": {}}, namespace)
    except (NameError, TypeError) as error:  # a name with no string value here
        raise ValueError(ast.unparse(node)) from error


def _hash(hex_digest: str) -> str:
    """Keras's `get_file(file_hash=...)`: sha256 if 64 hex digits, md5 if 32."""
    return {64: "sha256", 32: "md5"}[len(hex_digest)] + ":" + hex_digest


def keras_module_rows(source: str, files: dict[str, str]) -> list[tuple[str, str, str]]:
    """`files`' URLs and hashes as one Keras Applications module builds them: a `get_file`
    call with a literal `file_hash` (its origin evaluated with the string variables assigned
    above it: `BASE_WEIGHT_URL + fname`), or `BASE_WEIGHT(S)_PATH + file` hashed by
    `WEIGHTS_HASHES[key][0]`, the key the model's name ends with (`efficientnetb0`: `b0`), or
    in a module that checks no hash (MobileNet's), with none."""
    tree = ast.parse(source)
    namespace, found = {}, {}
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.Call)]
    for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset)):  # in source order
        try:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                namespace[node.targets[0].id] = _evaluate(node.value, namespace)
            elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("get_file"):
                (digest,) = [k.value for k in node.keywords if k.arg == "file_hash"]
                url, digest = _evaluate(node.args[1], namespace), _evaluate(digest, namespace)
                found[url.rsplit("/", 1)[1]] = (url, _hash(digest))
        except ValueError:  # not a string expression: a layer, a hash from the table
            continue
    base = namespace.get("BASE_WEIGHTS_PATH", namespace.get("BASE_WEIGHT_PATH"))
    hashes = namespace.get("WEIGHTS_HASHES", {})
    rows = []
    for file, key in files.items():
        if file in found:
            url, digest = found[file]
        else:
            table_keys = [k for k in hashes if file.removesuffix(".h5").endswith(k)]
            if len(table_keys) == 1:
                digest = _hash(hashes[table_keys[0]][0])
            elif "file_hash" not in source:  # the module checks no hash
                digest = ""
            else:
                raise SystemExit(f"{file}: no get_file call names it, no one hash fits it")
            url = base + file
        rows.append((url, key, digest))
    return rows


def keras_rows(directories: list[Path]) -> list[tuple[str, str, str]]:
    """Every module's rows from each directory that has it; two directories must agree."""
    rows = {}
    for module, files in KERAS.items():
        sources = [d / f"{module}.py" for d in directories if (d / f"{module}.py").exists()]
        if not sources:
            raise SystemExit(f"no Keras source has {module}.py")
        for path in sources:
            for url, key, digest in keras_module_rows(path.read_text(), files):
                if rows.setdefault(url, (url, key, digest)) != (url, key, digest):
                    raise SystemExit(f"{path} disagrees on {url}: {digest} vs {rows[url][2]}")
    return list(rows.values())


_AKAMASTER = "akamaster/pytorch_resnet_cifar10"
_AKAMASTER_FILE = re.compile(
    rf"https://github\.com/{_AKAMASTER}/raw/master/pretrained_models/(resnet\d+)-[0-9a-f]{{8}}\.th"
)


def akamaster_rows(readme: Path) -> list[tuple[str, str, str]]:
    """The hash-named files Idelbayev's README links, whose architecture we have."""
    found = {m.group(0): m.group(1) for m in _AKAMASTER_FILE.finditer(readme.read_text())}
    return [(url, arch, "") for url, arch in found.items() if arch in ARCHITECTURES]


def current_sections(path: Path) -> dict[str, list[tuple[str, ...]]]:
    """The table's rows by source, as its header counts them (sources keep their order)."""
    lines = path.read_text().splitlines()
    counts = [re.fullmatch(r"#   (.+): (\d+)", line) for line in lines]
    counts = [(m.group(1), int(m.group(2))) for m in counts if m]
    rows = [tuple(line.split("\t")) for line in lines if line and not line.startswith("#")][1:]
    sections, start = {}, 0
    for source, count in counts:
        sections[source], start = rows[start : start + count], start + count
    return sections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timm-python", help="a venv's python with timm")
    parser.add_argument("--timm-tools", default="/work/shared/tools", help="has timm_compat.py")
    parser.add_argument("--torchvision", type=Path, help="torchvision/models")
    parser.add_argument("--keras", type=Path, nargs="+", help="applications dirs")
    parser.add_argument("--akamaster-readme", type=Path, help=f"{_AKAMASTER}'s README.md")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    sections = current_sections(args.out) if args.out.exists() else {}

    def replace(prefix: str, source: str, rows: list) -> None:
        """A source's rows in its section's place (a new source's last), under its new name."""
        items = [(s, r) for s, r in sections.items() if not s.startswith(prefix)]
        at = next((i for i, s in enumerate(sections) if s.startswith(prefix)), len(items))
        sections.clear()
        sections.update([*items[:at], (source, rows), *items[at:]])

    if args.timm_python:
        timm_version, timm = timm_rows(args.timm_python, args.timm_tools)
        replace("timm ", f"timm {timm_version}", timm)
    if args.torchvision:
        replace("torchvision ", _package(args.torchvision), torchvision_rows(args.torchvision))
    if args.keras:
        source = "Keras Applications of " + ", ".join(map(_package, args.keras))
        replace("Keras Applications ", source, keras_rows(args.keras))
    if args.akamaster_readme:
        replace(_AKAMASTER, _AKAMASTER, akamaster_rows(args.akamaster_readme))
    header = [
        "# Published weights that load into nets_weights.architectures.ARCHITECTURES, one a row:",
        "# the weights' name (timm's pretrained name: the Hub repo timm/<name>) or URL",
        "# (torchvision's, Keras Applications', Idelbayev's CIFAR ResNets'), the ARCHITECTURES key",
        "# load_pretrained loads them as, and the hash Keras checks the file with (torchvision's",
        "# and Idelbayev's are in the file's name, and the Hub checks timm's). Written by",
        "# tools/catalogue.py (its docstring has the command)",
        "# from the sources' own code; do not edit by hand. Rows, sorted within each source:",
        *(f"#   {source}: {len(rows)}" for source, rows in sections.items()),
        "weights\tarchitecture\thash",
    ]
    lines = [*header, *("\t".join(row) for rows in sections.values() for row in sorted(rows))]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}: " + ", ".join(f"{s}: {len(r)}" for s, r in sections.items()))


if __name__ == "__main__":
    main()
