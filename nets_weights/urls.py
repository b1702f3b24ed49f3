"""Weight files by URL (torchvision's, Keras Applications', any other), downloaded once into the
cache their own libraries use, so files PyTorch or Keras already fetched are not fetched again:

- `.pth` / `.pt`: torch.hub's, `$TORCH_HOME/hub/checkpoints` (default `~/.cache/torch/...`);
- `.h5`: Keras's, `$KERAS_HOME/models` (default `~/.keras/models`);
- anything else: ours, `$XDG_CACHE_HOME/jax_nets_factory/weights` (default `~/.cache/...`).

A download is checked against the hash its source publishes (torchvision's file names end in
`-<sha256 prefix>`, as torch.hub checks; Keras's registry has a hash per file, in
`nets_weights/catalogue.tsv`), and its length against the server's. It is written to a temporary
file beside its destination and renamed only when whole and checked, so the cache never holds a
half-written or wrong file, and a later call downloads again once the cause is gone. A file in
the cache is used as it is, with no network.
"""

import contextlib
import hashlib
import http.client
import os
import re
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import tqdm

from nets_weights import catalogue, files
from nets_weights.files import KERAS_SUFFIXES, TORCH_SUFFIXES, WeightFileError

_HASH_IN_NAME = re.compile(r"-([a-f0-9]{8,64})\.")  # torch.hub's convention
_TIMEOUT_SECONDS = 60.0  # to connect, and between two reads
_CHUNK = 1 << 20


def is_url(spec: str) -> bool:
    return spec.startswith(("https://", "http://"))


def cache_folder(file_name: str) -> Path:
    """Where a downloaded file of this name lives: its library's own cache (module docstring)."""
    suffix = files.suffix(file_name)
    xdg = Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser()
    if suffix in TORCH_SUFFIXES:
        torch_home = Path(os.environ.get("TORCH_HOME", xdg / "torch")).expanduser()
        return torch_home / "hub" / "checkpoints"
    if suffix in KERAS_SUFFIXES:
        return Path(os.environ.get("KERAS_HOME", "~/.keras")).expanduser() / "models"
    return cache_home() / "weights"


def cache_home() -> Path:
    """This project's cache: `$XDG_CACHE_HOME/jax_nets_factory` (default `~/.cache/...`), with
    its downloaded weights and datasets in folders of their own."""
    return Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "jax_nets_factory"


def expected_hash(url: str) -> tuple[str, str] | None:
    """(algorithm, hex digest or its prefix) that the published file must have, or None."""
    name = Path(urlparse(url).path).name
    if match := _HASH_IN_NAME.search(name):
        return "sha256", match.group(1)
    return catalogue.hash_of(url)


def download(url: str) -> Path:
    """The local copy of `url`: the cached one, or a new, checked download (module docstring).
    Raises `WeightFileError` with one line for every failure; nothing is left half-written."""
    name = Path(urlparse(url).path).name
    if not name:
        raise WeightFileError(f"{url} does not name a file")
    return download_to(url, cache_folder(name) / name, expected_hash(url))


def download_to(
    url: str,
    target: Path,
    want: tuple[str, str] | None,
    size: int | None = None,
    progress: bool = False,
) -> Path:
    """`target`, downloaded from `url` unless it is there, checked against `want` (algorithm,
    hex digest or its prefix) and `size` (bytes) when given, and renamed into place only when
    whole and checked (module docstring); `progress` shows a progress bar on stderr. Raises
    `WeightFileError` with one line for every failure."""
    if target.is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with _temporary_beside(target) as partial:
            _fetch(url, partial, want, progress)
            if size is not None and os.path.getsize(partial) != size:
                got = os.path.getsize(partial)
                raise WeightFileError(
                    f"{url}: {got} bytes, not the published {size} (nothing was kept)"
                )
            os.replace(partial, target)
    except OSError as e:
        reason = e.strerror or str(e)
        raise WeightFileError(f"cannot save {url} into {target.parent}: {reason}") from None
    return target


@contextlib.contextmanager
def _temporary_beside(target: Path):
    """A new file's path in `target`'s folder, readable as the umask allows (a cache other
    accounts share), removed on the way out unless it was renamed."""
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(name, 0o666 & ~umask)
    try:
        yield name
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def _fetch(url: str, path: str, want: tuple[str, str] | None, progress: bool = False) -> None:
    """Streams `url` into `path`, checking its length and hash."""
    request = urllib.request.Request(url, headers={"User-Agent": "jax-nets-factory"})
    digest = hashlib.new(want[0]) if want else None
    received = 0
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_SECONDS) as response:
            length = response.headers.get("Content-Length")
            bar = tqdm.tqdm(
                total=int(length) if length else None,
                desc=Path(urlparse(url).path).name,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                disable=not progress,
            )
            with open(path, "wb") as out, bar:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
                    if digest:
                        digest.update(chunk)
    except urllib.error.HTTPError as e:
        e.close()  # it holds the connection
        raise WeightFileError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise WeightFileError(f"cannot download {url}: {e.reason} (no network?)") from None
    except (TimeoutError, ConnectionError, http.client.HTTPException) as e:
        raise WeightFileError(f"cannot download {url}: {e} after {received} bytes") from None
    if length is not None and received != int(length):
        raise WeightFileError(f"download of {url} stopped at {received} of {length} bytes")
    if digest and not digest.hexdigest().startswith(want[1]):
        raise WeightFileError(
            f"{url}: {want[0]} {digest.hexdigest()[: len(want[1])]} is not the published "
            f"{want[1]}; the download is corrupt or the file changed (nothing was kept)"
        )
