"""Reading weight files into `{name: numpy array}`, with no framework required where possible.

- `.safetensors` (the Hugging Face Hub's format for timm weights): `safetensors.numpy`, no torch.
- a folder holding `model.safetensors` (or `pytorch_model.bin`) and `config.json`: the Hub's
  layout, read as one unit; `config.json` names the architecture and its preprocessing.
- `.pth` / `.pt` / `.th` / `.pth.tar` / `.bin` (torchvision's downloads, and checkpoints as
  people save them): `torch_files`, no torch, never running code from the file. The weights are
  the file's state dict, or the one it holds under `state_dict`, `model`, `model_state_dict`,
  `module`, `net` (the training weights, first) or `ema`, `state_dict_ema`, `model_ema` (the
  moving averages, when the file has only those).
- `.h5` / `.hdf5` (Keras Applications' downloads): Keras 2's `save_weights` layout, read with h5py
  when it is installed (`pip install 'jax-nets-factory[keras]'`). The root's `layer_names`
  attribute lists the layers, each layer's group its `weight_names` (`conv1/kernel:0`), whose
  datasets it holds; a whole-model file (`model.save`) has the same under `model_weights`. Keys
  are `<layer>/<leaf>`: `conv1/kernel:0`, `conv_dw_1/depthwise_kernel:0`; a layer of layers
  (Keras's ConvNeXt's `Sequential` stem) keeps each weight's inner layer:
  `convnext_tiny_stem/convnext_tiny_stem_conv/kernel:0`.

Keys lose the prefix every key of a file has from `torch.nn.DataParallel` (`module.`) or
`torch.compile` (`_orig_mod.`). Nothing here downloads anything: paths are local files.
"""

import dataclasses
import importlib
import json
import pickle
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from nets_weights import torch_files


class WeightFileError(ValueError):
    """A weight file that cannot be read or does not fit the network; the message is one line."""


TORCH_SUFFIXES = (".pth", ".pt", ".th", ".pth.tar", ".bin")
KERAS_SUFFIXES = (".h5", ".hdf5")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# Where checkpoints hold their weights: the training weights, then the moving averages.
STATE_DICT_KEYS = ("state_dict", "model", "model_state_dict", "module", "net")
EMA_KEYS = ("ema", "state_dict_ema", "model_ema", "ema_state_dict")
WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DataParallel's, torch.compile's


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
    return suffix(path) in (".safetensors", *TORCH_SUFFIXES, *KERAS_SUFFIXES, ".keras")


def suffix(path: str | Path) -> str:
    """A weight file's format by its name: `.pth`, and `.pth.tar` as one."""
    name = Path(path).name.lower()
    return ".pth.tar" if name.endswith(".pth.tar") else Path(name).suffix


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
    kind = suffix(path)
    if kind == ".safetensors":
        return without_wrapper_prefixes(_read_safetensors(path))
    if kind in TORCH_SUFFIXES:
        return without_wrapper_prefixes(_read_torch(path))
    if kind in KERAS_SUFFIXES:
        return _read_keras(path)
    if kind == ".keras":
        raise WeightFileError(
            f"{path}: Keras 3 .keras archives are not readable; save the weights in Keras 2's "
            "HDF5 layout (the published .h5 files' one)"
        )
    raise WeightFileError(
        f"{path}: unknown weight format {kind or '(no suffix)'}; expected .safetensors, "
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
    try:
        saved = torch_files.load(path)
    except torch_files.UnsafePickle as e:
        raise WeightFileError(
            f"{path} pickles {e}, which torch.load rebuilds only with weights_only=False, by "
            "running code from the file; we never do. If you trust the file, save its weights "
            "alone: torch.save(torch.load(path, weights_only=False)['state_dict'], 'weights.pth')"
        ) from None
    except (ValueError, OSError, EOFError, pickle.UnpicklingError) as e:
        raise WeightFileError(f"{path} is not a readable PyTorch file: {e}") from None
    state = state_dict(saved)
    if state is None:
        held = ", ".join(map(repr, saved)) if isinstance(saved, dict) else type(saved).__name__
        raise WeightFileError(
            f"{path} holds no weights: its top-level keys are {held or '(none)'}; expected a state "
            f"dict, or one under {', '.join(map(repr, STATE_DICT_KEYS + EMA_KEYS))}"
        )
    # float32 for floating tensors (our variables' dtype), integers (counters) as they are
    return {k: v.astype(np.float32) if _floating(v) else v for k, v in state.items()}


def _floating(array: np.ndarray) -> bool:
    return np.issubdtype(array.dtype, np.floating) or array.dtype == ml_dtypes.bfloat16


def state_dict(saved: Any) -> dict[str, np.ndarray] | None:
    """The weights in what `torch.save` wrote: a state dict, or the first one of the checkpoint
    (`STATE_DICT_KEYS`, then `EMA_KEYS`, looked into recursively); None if there is none."""
    if not isinstance(saved, dict):
        return None
    for key in STATE_DICT_KEYS + EMA_KEYS:
        found = state_dict(saved.get(key))
        if found:
            return found
    tensors = {k: v for k, v in saved.items() if isinstance(v, np.ndarray)}
    return tensors or None


def without_wrapper_prefixes(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`tensors` without the `WRAPPER_PREFIXES` that every key has (`module._orig_mod.fc.bias`
    -> `fc.bias`)."""
    while tensors:
        prefix = next((p for p in WRAPPER_PREFIXES if all(k.startswith(p) for k in tensors)), None)
        if prefix is None:
            break
        tensors = {k.removeprefix(prefix): v for k, v in tensors.items()}
    return tensors


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
