"""Reading weight files into `{name: numpy array}`, with no framework required where possible.

- `.safetensors` (the Hugging Face Hub's format for timm weights): `safetensors.numpy`, no torch.
- a folder holding `model.safetensors` (or `pytorch_model.bin`) and `config.json`: the Hub's
  layout, read as one unit; `config.json` names the architecture and its preprocessing.
- `.pth` / `.pt` / `.bin` (torchvision's downloads): read with torch when it is installed.
- `.h5` / `.hdf5` (Keras Applications' downloads): Keras 2's `save_weights` layout, read with h5py
  when it is installed (`pip install 'jax-nets-factory[keras]'`). The root's `layer_names`
  attribute lists the layers, each layer's group its `weight_names` (`conv1/kernel:0`), whose
  datasets it holds; a whole-model file (`model.save`) has the same under `model_weights`. Keys
  are `<layer>/<leaf>`: `conv1/kernel:0`, `conv_dw_1/depthwise_kernel:0`; a layer of layers
  (Keras's ConvNeXt's `Sequential` stem) keeps each weight's inner layer:
  `convnext_tiny_stem/convnext_tiny_stem_conv/kernel:0`.

Nothing here downloads anything: paths are local files.
"""

import dataclasses
import importlib
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np


class WeightFileError(ValueError):
    """A weight file that cannot be read or does not fit the network; the message is one line."""


TORCH_SUFFIXES = (".pth", ".pt", ".bin")
KERAS_SUFFIXES = (".h5", ".hdf5")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


@dataclasses.dataclass(frozen=True)
class WeightFile:
    """A file's tensors, and what its `config.json` says (empty without one)."""

    path: Path
    tensors: dict[str, np.ndarray]
    config: dict[str, Any]

    @property
    def architecture(self) -> str | None:
        return self.config.get("architecture")


def is_weight_file(path: str | Path) -> bool:
    """Whether `path` is a published-weights file or Hub folder (rather than a training run)."""
    path = Path(path).expanduser()
    if path.is_dir():
        return any((path / name).exists() for name in WEIGHT_FILES)
    return path.suffix.lower() in (".safetensors", *TORCH_SUFFIXES, *KERAS_SUFFIXES, ".keras")


def read(path: str | Path) -> WeightFile:
    """The tensors of a weight file or a Hub folder; one-line errors for what cannot be read."""
    path = Path(path).expanduser()
    if not path.exists():
        raise WeightFileError(f"no such weight file or folder: {path}")
    config = read_config(path)
    if path.is_dir():
        found = [path / name for name in WEIGHT_FILES if (path / name).exists()]
        if not found:
            raise WeightFileError(f"{path} holds none of {', '.join(WEIGHT_FILES)}")
        path = found[0]
    return WeightFile(path, _read_tensors(path), config)


def read_config(path: str | Path) -> dict[str, Any]:
    """The Hub `config.json` of a folder, or beside a `model.safetensors` in one; else `{}`."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / "config.json"
    elif path.name in WEIGHT_FILES:
        path = path.parent / "config.json"
    else:
        return {}
    if not path.exists():
        return {}
    try:
        config = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WeightFileError(f"{path} is not a JSON config: {e}") from None
    if not isinstance(config, dict):
        raise WeightFileError(f"{path} is not a JSON object")
    return config


def _read_tensors(path: Path) -> dict[str, np.ndarray]:
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        return _read_safetensors(path)
    if suffix in TORCH_SUFFIXES:
        return _read_torch(path)
    if suffix in KERAS_SUFFIXES:
        return _read_keras(path)
    if suffix == ".keras":
        raise WeightFileError(
            f"{path}: Keras 3 .keras archives are not readable; save the weights in Keras 2's "
            "HDF5 layout (the published .h5 files' one)"
        )
    raise WeightFileError(
        f"{path}: unknown weight format {suffix or '(no suffix)'}; expected .safetensors, "
        f"{', '.join(TORCH_SUFFIXES + KERAS_SUFFIXES)}, or a folder with "
        f"{' or '.join(WEIGHT_FILES)}"
    )


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as e:
        raise WeightFileError(f"{path} is not a readable safetensors file: {e}") from None


def _require(module: str, path: Path, what: str, how: str) -> Any:
    """`import module`, or one line saying that reading `path` (`what`) needs it, and `how`."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise WeightFileError(f"{path} is {what}, and {module} is not installed: {how}") from None


def _read_torch(path: Path) -> dict[str, np.ndarray]:
    torch = _require(
        "torch",
        path,
        "a PyTorch file",
        "`pip install torch` (the CPU build is enough), or convert it to safetensors where torch "
        "is installed: `safetensors.torch.save_file(torch.load(path), 'model.safetensors')`",
    )
    if not zipfile.is_zipfile(path):
        raise WeightFileError(f"{path} is not a PyTorch file (torch.save writes zip archives)")
    state = torch.load(path, map_location="cpu", weights_only=True)
    state = state.get("state_dict", state) if isinstance(state, dict) else state
    if not isinstance(state, dict):
        raise WeightFileError(f"{path} holds a {type(state).__name__}, not a state dict")
    return {k: _numpy(v) for k, v in state.items()}


def _read_keras(path: Path) -> dict[str, np.ndarray]:
    h5py = _require(
        "h5py", path, "a Keras HDF5 file", "`pip install 'jax-nets-factory[keras]'` (or h5py)"
    )
    try:
        with h5py.File(path, "r") as f:
            root = f.get("model_weights", f)
            if "layer_names" not in root.attrs:
                raise WeightFileError(
                    f"{path} is not in Keras 2's save_weights layout (no 'layer_names'; Keras 3's "
                    "`.weights.h5` is another layout)"
                )
            tensors = {}
            for layer in map(_text, root.attrs["layer_names"]):
                group = root[layer]
                for name in map(_text, group.attrs.get("weight_names", ())):
                    tensors[_keras_key(layer, name)] = np.asarray(group[name])
            return tensors
    except (OSError, KeyError) as e:
        raise WeightFileError(f"{path} is not a readable Keras HDF5 file: {e}") from None


def _keras_key(layer: str, name: str) -> str:
    """`conv1`, `conv1/kernel:0` -> `conv1/kernel:0`; a layer of layers (a `Sequential` stem)
    names each weight by its inner layer: `stem`, `stem_conv/kernel:0` ->
    `stem/stem_conv/kernel:0`."""
    inner, _, leaf = name.rpartition("/")
    return f"{layer}/{leaf}" if inner in ("", layer) else f"{layer}/{inner}/{leaf}"


def _text(name: bytes | str) -> str:
    return name.decode() if isinstance(name, bytes) else str(name)


def _numpy(tensor) -> np.ndarray:
    """float32 for floating tensors (numpy has no bfloat16), the tensor's own dtype otherwise."""
    tensor = tensor.detach()
    return (tensor.float() if tensor.is_floating_point() else tensor).numpy()
