"""PyTorch's `torch.save` files as numpy arrays, without torch, and without running their code.

A `.pth` file is a pickle whose tensors point into raw storages: since torch 1.6 a zip archive
(`<name>/data.pkl` and one `<name>/data/<key>` record per storage), before it the legacy stream
(a magic number, the protocol, the machine's sizes, the pickle, the storage keys, then each
storage as an int64 element count and its bytes). Unpickling is restricted to what
`torch.load(weights_only=True)` allows (containers, tensors, parameters, storages, numbers and
strings): a file that pickles anything else (an `argparse.Namespace`, a whole `nn.Module`)
would run code from the file to load, so it is refused in one line that names the object.
"""

import dataclasses
import io
import pickle
import struct
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import ml_dtypes
import numpy as np

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
# torch's dtypes (`torch.float32`, pickled by name since torch 2) and their storage classes
# (`torch.FloatStorage`, the names in older files' storage records)
_DTYPES = {
    "float64": (np.float64, "DoubleStorage"),
    "float32": (np.float32, "FloatStorage"),
    "float16": (np.float16, "HalfStorage"),
    "bfloat16": (ml_dtypes.bfloat16, "BFloat16Storage"),
    "int64": (np.int64, "LongStorage"),
    "int32": (np.int32, "IntStorage"),
    "int16": (np.int16, "ShortStorage"),
    "int8": (np.int8, "CharStorage"),
    "uint8": (np.uint8, "ByteStorage"),
    "bool": (np.bool_, "BoolStorage"),
    "complex64": (np.complex64, "ComplexFloatStorage"),
    "complex128": (np.complex128, "ComplexDoubleStorage"),
}


class UnsafePickle(ValueError):
    """The file pickles an object that only `torch.load(weights_only=False)` rebuilds."""


@dataclasses.dataclass(frozen=True)
class _DType:
    """A torch dtype or storage class, as the numpy dtype of its elements."""

    dtype: np.dtype


@dataclasses.dataclass
class _Tensor:
    """A tensor before its storage's bytes are read (legacy files hold them after the pickle)."""

    storage: np.ndarray
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]

    def array(self) -> np.ndarray:
        itemsize = self.storage.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(
            self.storage[self.offset :], self.size, tuple(s * itemsize for s in self.stride)
        )
        native = view.dtype.isnative or view.dtype.byteorder == "|"
        return np.array(view) if native else view.astype(view.dtype.newbyteorder("="))


def _rebuild_tensor_v2(storage, offset, size, stride, *args) -> _Tensor:
    return _Tensor(storage, offset, tuple(size), tuple(stride))


def _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype, *rest):
    return _Tensor(storage.view(dtype.dtype), offset, tuple(size), tuple(stride))


def _rebuild_parameter(data, *args) -> Any:
    return data


def _rebuild_from_type_v2(func: Callable, new_type: Any, args: tuple, state: Any) -> Any:
    if new_type not in (_TENSOR, _PARAMETER):
        raise UnsafePickle(f"a tensor subclass ({new_type})")
    return func(*args)


_TENSOR, _PARAMETER = object(), object()
_ALLOWED = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch", "Tensor"): _TENSOR,
    ("torch.nn.parameter", "Parameter"): _PARAMETER,
    **{("torch", name): _DType(np.dtype(dtype)) for name, (dtype, _) in _DTYPES.items()},
    **{("torch", storage): _DType(np.dtype(dtype)) for dtype, storage in _DTYPES.values()},
    ("torch", "UntypedStorage"): _DType(np.dtype(np.uint8)),
}


class _Unpickler(pickle.Unpickler):
    """Rebuilds only `_ALLOWED`'s globals; storages come from `storage(type, key, numel)`."""

    def __init__(self, file: IO[bytes], storage: Callable[[np.dtype, str, int], np.ndarray]):
        super().__init__(file, encoding="utf-8")
        self._storage = storage

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        raise UnsafePickle(f"{module}.{name}")

    def persistent_load(self, pid: tuple) -> np.ndarray:
        kind, storage_type, key, _location, numel, *view = pid
        if kind != "storage":
            raise UnsafePickle(f"a pickled {kind!r}")
        storage = self._storage(storage_type.dtype, str(key), int(numel))
        if view and view[0] is not None:  # a legacy view into another storage
            _, start, length = view[0]
            storage = storage[start : start + length]
        return storage


def load(path: Path) -> Any:
    """The object `torch.save` wrote to `path`, with numpy arrays for its tensors. Raises
    `UnsafePickle` naming an object that loading would run code for, `ValueError` for a file
    that is not one of torch's formats."""
    if zipfile.is_zipfile(path):
        return _load_zip(path)
    with open(path, "rb") as f:
        return _load_legacy(f)


def _load_zip(path: Path) -> Any:
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
        if any(n.endswith("/constants.pkl") for n in names):
            raise ValueError("a TorchScript archive (torch.jit.save): save its state_dict()")
        if not pickles:
            raise ValueError("a zip archive without torch.save's data.pkl")
        root = pickles[0].rsplit("/", 1)[0]
        big = f"{root}/byteorder" in names and archive.read(f"{root}/byteorder") == b"big"

        def storage(dtype: np.dtype, key: str, numel: int) -> np.ndarray:
            dtype = dtype.newbyteorder(">") if big and dtype.itemsize > 1 else dtype
            return np.frombuffer(archive.read(f"{root}/data/{key}"), dtype)

        return _arrays(_Unpickler(io.BytesIO(archive.read(pickles[0])), storage).load())


def _load_legacy(f: IO[bytes]) -> Any:
    try:
        magic = pickle.load(f)
    except Exception:
        magic = None
    if magic != _LEGACY_MAGIC:
        raise ValueError(
            "not a file torch.save writes (neither a zip archive nor the legacy format)"
        )
    pickle.load(f)  # the protocol version
    little = pickle.load(f).get("little_endian", True)
    storages: dict[str, np.ndarray] = {}

    def storage(dtype: np.dtype, key: str, numel: int) -> np.ndarray:
        if key not in storages:
            big = not little and dtype.itemsize > 1
            storages[key] = np.empty(numel, dtype.newbyteorder(">") if big else dtype)
        return storages[key]

    result = _Unpickler(f, storage).load()
    for key in pickle.load(f):
        (numel,) = struct.unpack("<q" if little else ">q", f.read(8))
        target = storages[str(key)]
        data = f.read(numel * target.dtype.itemsize)
        if len(data) != numel * target.dtype.itemsize or numel != target.size:
            raise ValueError(f"storage {key} is truncated")
        target[:] = np.frombuffer(data, target.dtype)
    return _arrays(result)


def _arrays(obj: Any) -> Any:
    """`obj` with each `_Tensor` as its numpy array (read once its storage is filled)."""
    if isinstance(obj, _Tensor):
        return obj.array()
    if isinstance(obj, dict):
        return type(obj)((k, _arrays(v)) for k, v in obj.items())
    if isinstance(obj, list | tuple):
        return type(obj)(_arrays(v) for v in obj)
    return obj
