"""Weights by Hugging Face Hub name: a timm name (`resnet50.a1_in1k`, which timm publishes as the
repository `timm/resnet50.a1_in1k`) or a repository (`hf-hub:timm/resnet50.a1_in1k`, keras-hub's
`hf://timm/resnet50.a1_in1k`).

`huggingface_hub` (the `hub` extra) downloads the repository's `config.json` and
`model.safetensors` into its standard cache, with its own settings: `HF_HOME` / `HF_HUB_CACHE`
for the folder, `HF_ENDPOINT` for a mirror, `HF_HUB_OFFLINE=1` (or `local_files_only`) to use the
cache alone, `HF_TOKEN` for private repositories. What is cached is never downloaded again. The
client writes each file under a temporary name and renames it when complete; here a file it has
just downloaded is also checked against the hash the Hub published for it (the ETag: an LFS
file's sha256, a small file's git blob id), which the client does not do, and removed when it
differs. Every failure is one line.
"""

import contextlib
import errno
import hashlib
import logging
import os
import re
from pathlib import Path

from nets_weights import catalogue
from nets_weights.files import KERAS_SUFFIXES, TORCH_SUFFIXES, WeightFileError

PREFIXES = ("hf-hub:", "hf://")
_TIMM_NAME = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)+")  # architecture.tag
_FILE_SUFFIXES = (".safetensors", ".json", *TORCH_SUFFIXES, *KERAS_SUFFIXES, ".keras")
_WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # timm's Hub layout, newest first


def is_hub_name(spec: str) -> bool:
    """A repository (`hf-hub:org/name`) or a timm name (`arch.tag`, not a file's name)."""
    if spec.startswith(PREFIXES):
        return True
    return bool(_TIMM_NAME.fullmatch(spec)) and not spec.endswith(_FILE_SUFFIXES)


def repository(spec: str) -> str:
    """The Hub repository of a Hub name: `resnet50.a1_in1k` -> `timm/resnet50.a1_in1k`."""
    for prefix in PREFIXES:
        if spec.startswith(prefix):
            return spec.removeprefix(prefix)
    return f"timm/{spec}"


def download(spec: str, revision: str | None = None, local_files_only: bool = False) -> Path:
    """The local snapshot folder of the Hub name `spec` (`config.json` and the weights),
    downloaded once into the Hub's cache."""
    try:
        import huggingface_hub

        # Imported now, not lazily inside the download: importing the client's logging sets its
        # level, which `_client_quiet` must set after.
        from huggingface_hub import constants, errors, file_download  # noqa: F401
    except ImportError:
        raise WeightFileError(
            f"{spec!r} names weights on the Hugging Face Hub, and huggingface_hub is not "
            "installed: pip install 'jax-nets-factory[hub]'"
        ) from None
    repo = repository(spec)
    if "/" not in repo or not repo.split("/")[1]:
        raise WeightFileError(
            f"{spec!r}: a Hub repository is 'owner/name', e.g. {PREFIXES[0]}timm/resnet50.a1_in1k"
        )
    with _client_quiet():
        config = _file(huggingface_hub, spec, repo, "config.json", revision, local_files_only)
        for name in _WEIGHTS:
            try:
                _file(huggingface_hub, spec, repo, name, revision, local_files_only)
                return config.parent
            except _Missing:
                continue
    raise WeightFileError(f"{repo} holds none of {', '.join(_WEIGHTS)}")


@contextlib.contextmanager
def _client_quiet():
    """The client's warnings (a line per retry while the network is down) give way to our one
    line when it gives up; its progress bars stay."""
    client = logging.getLogger("huggingface_hub")
    level = client.level
    client.setLevel(logging.ERROR)
    try:
        yield
    finally:
        client.setLevel(level)


class _Missing(WeightFileError):
    """The repository has no such file."""


def _file(hub, spec: str, repo: str, name: str, revision: str | None, offline: bool) -> Path:
    """One file of the repository, from the cache or downloaded and checked (module docstring)."""
    errors = hub.errors
    cached = hub.try_to_load_from_cache(repo, name, revision=revision)
    offline = offline or hub.constants.HF_HUB_OFFLINE
    if not isinstance(cached, str) and not offline and not _answers(hub, repo, name, revision):
        raise WeightFileError(_unreachable(hub, repo, name))
    try:
        path = Path(hub.hf_hub_download(repo, name, revision=revision, local_files_only=offline))
    except errors.RevisionNotFoundError:
        raise WeightFileError(f"{repo} has no revision {revision!r}") from None
    except errors.RepositoryNotFoundError:
        raise WeightFileError(_no_repository(spec, repo)) from None
    except errors.RemoteEntryNotFoundError:
        raise _Missing(f"{repo} has no {name}") from None
    except errors.LocalEntryNotFoundError:
        if offline:
            raise WeightFileError(
                f"{repo}: {name} is not in the Hub cache ({hub.constants.HF_HUB_CACHE}) and "
                "offline mode (HF_HUB_OFFLINE=1 or local_files_only) forbids downloading it"
            ) from None
        raise WeightFileError(_unreachable(hub, repo, name)) from None
    except errors.HfHubHTTPError as e:
        raise WeightFileError(f"{repo}: {name}: {str(e).splitlines()[0]}") from None
    except OSError as e:  # a full disk, a read-only cache, a download shorter than announced
        _remove_partial_blobs(hub, repo)
        reason = os.strerror(e.errno) if e.errno else str(e).splitlines()[0]
        cache = e.errno in (errno.ENOSPC, errno.EROFS, errno.EACCES)
        where = f" (the Hub cache: {hub.constants.HF_HUB_CACHE})" if cache else ""
        raise WeightFileError(f"{repo}: cannot download {name}: {reason}{where}") from None
    if not isinstance(cached, str):  # downloaded now: check it once, here
        _check(path, repo, name)
    return path


def _answers(hub, repo: str, name: str, revision: str | None) -> bool:
    """Whether the Hub answers a request for the file (an error is an answer), asked once. With
    nothing cached, the client's download retries a failed connection 5 times before it gives up,
    waiting 1 + 2 + 4 + 8 + 8 = 23 s: without a network, this says so at once (or after the
    client's HF_HUB_ETAG_TIMEOUT, 10 s, where packets are dropped)."""
    url = hub.hf_hub_url(repo, name, revision=revision)
    try:
        hub.get_hf_file_metadata(url, timeout=hub.constants.HF_HUB_ETAG_TIMEOUT)
    except hub.errors.HfHubHTTPError:
        return True  # the download says what the Hub answered
    except Exception:  # no connection: the client's exception types vary with its version
        return False
    return True


def _unreachable(hub, repo: str, name: str) -> str:
    return (
        f"{repo}: cannot reach the Hub ({hub.constants.ENDPOINT}; no network?) and {name} "
        f"is not in its cache ({hub.constants.HF_HUB_CACHE})"
    )


def _no_repository(spec: str, repo: str) -> str:
    """A name that does not exist, with the catalogued names closest to it."""
    close = catalogue.closest(spec.split(":")[-1].removeprefix("timm/"))
    hint = f"; close matches: {', '.join(close)}" if close else ""
    return f"no Hub repository {repo} (or it is private: set HF_TOKEN){hint}"


def _check(path: Path, repo: str, name: str) -> None:
    """The file against the Hub's hash for it, its blob's name: sha256 for an LFS file, the git
    blob id (sha1 of `blob <size>\\0` + content) for a small one. Removed when it differs."""
    blob = path.resolve()
    published = blob.name
    data = hashlib.sha256() if len(published) == 64 else hashlib.sha1()
    if len(published) == 40:
        data.update(f"blob {blob.stat().st_size}\0".encode())
    elif len(published) != 64:
        return  # not a hash the Hub publishes for content (a mirror's own ETag)
    with open(blob, "rb") as f:
        while chunk := f.read(1 << 20):
            data.update(chunk)
    if data.hexdigest() != published:
        for file in (path, blob):
            with contextlib.suppress(FileNotFoundError):
                file.unlink()
        raise WeightFileError(
            f"{repo}: {name} does not have the hash the Hub published ({published[:12]}...); "
            "the download is corrupt and was removed: try again"
        )


def _remove_partial_blobs(hub, repo: str) -> None:
    """The client keeps `<blob>.incomplete` to resume from; after a failed download we keep
    nothing half-written (a resumed download of a corrupt part would be checked, but a full disk
    needs the space back)."""
    folder = Path(hub.constants.HF_HUB_CACHE) / f"models--{repo.replace('/', '--')}" / "blobs"
    for part in folder.glob("*.incomplete"):
        with contextlib.suppress(OSError):
            part.unlink()
