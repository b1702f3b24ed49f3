"""CIFAR-10 and CIFAR-100 by name, downloaded once, then used offline:

    python -m nets_training.download cifar10            # or cifar100, or both; --dir=DIR elsewhere

The python-version archive goes into the cache, `$XDG_CACHE_HOME/jax_nets_factory/datasets`
(default `~/.cache/jax_nets_factory/datasets`), where `data.name=cifar10` finds it when
`data.dir` is unset; `data.download=true` does the same from `train.py`. As weights by URL
(`nets_weights.urls`): the archive is written to a temporary file beside its destination, its
size and md5 checked against the published ones, and renamed into place only then, so the cache
never holds a partial or wrong archive; one already there is used with no network. The data
source reads the archive itself (`sources.cifar`): nothing is extracted.
"""

import argparse
import dataclasses
import sys
from pathlib import Path

from nets_training.errors import UserError
from nets_weights import urls
from nets_weights.files import WeightFileError

COMMAND = "python -m nets_training.download"


@dataclasses.dataclass(frozen=True)
class Archive:
    url: str
    md5: str
    size: int  # bytes

    @property
    def file_name(self) -> str:
        return self.url.rsplit("/", 1)[1]


# The md5s are torchvision's (`CIFAR10.tgz_md5`, `CIFAR100.tgz_md5`), for the same files.
ARCHIVES = {
    "cifar10": Archive(
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "c58f30108f718f92721af3b95e74349a",
        170_498_071,
    ),
    "cifar100": Archive(
        "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        "eb9058c3a382ffc7106e4002c42a8d85",
        169_001_437,
    ),
}


class DownloadError(UserError):
    """A download that failed or did not match its published size and hash; one line."""


def cache_folder() -> Path:
    return urls.cache_home() / "datasets"


def destination(name: str, directory: str | None = None) -> Path:
    """Where `name`'s archive is (or goes): in the cache, or, with `directory`, that archive
    (a path ending in .tar.gz) or the archive's name in that folder."""
    file_name = ARCHIVES[name].file_name
    if directory is None:
        return cache_folder() / file_name
    path = Path(directory).expanduser()
    return path if path.name.endswith(".tar.gz") else path / file_name


def download(name: str, directory: str | None = None, progress: bool = True) -> Path:
    """The archive of `name` (`cifar10`, `cifar100`) at `destination(name, directory)`: the one
    there, or a new, checked download (module docstring), with a progress bar on stderr."""
    archive = ARCHIVES[name]
    target = destination(name, directory)
    try:
        return urls.download_to(archive.url, target, ("md5", archive.md5), archive.size, progress)
    except WeightFileError as e:
        raise DownloadError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=COMMAND,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("names", nargs="+", choices=sorted(ARCHIVES), help="the datasets")
    parser.add_argument("--dir", default=None, help=f"default: the cache, {cache_folder()}")
    args = parser.parse_args(argv)
    for name in args.names:
        try:
            print(download(name, args.dir))
        except UserError as e:
            print(f"download: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
