"""CIFAR by name (`python -m nets_training.download`, `data.download`): a small archive in the real
format, served on 127.0.0.1 (tests/local_hub.py), is downloaded once into the cache, checked
against its size and md5, and read from there offline; a wrong download is refused in one line
and leaves nothing behind; without data, the error names the command that downloads it."""

import hashlib
import io
import tarfile

import pytest

from nets_training import download, sources
from nets_training.config import DataConfig
from nets_training.errors import UserError
from tests.local_hub import LocalHub
from tests.test_training_data import write_cifar10

NAME = "cifar-10-python.tar.gz"


def small_archive(tmp_path) -> bytes:
    """The python version's layout, `cifar-10-batches-py/{data_batch_1..5,test_batch,...}`, with
    4 images per training batch and 3 test images."""
    write_cifar10(tmp_path / "source" / "cifar-10-batches-py")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(tmp_path / "source" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return buffer.getvalue()


@pytest.fixture
def server(tmp_path, monkeypatch):
    """Serves a small CIFAR-10 archive as the published one; the cache is in `tmp_path`."""
    hub = LocalHub()
    data = small_archive(tmp_path)
    hub.files[NAME] = data
    archive = download.Archive(f"{hub.url}/files/{NAME}", hashlib.md5(data).hexdigest(), len(data))
    monkeypatch.setitem(download.ARCHIVES, "cifar10", archive)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    yield hub
    hub.close()


def cache_files() -> list[str]:
    folder = download.cache_folder()
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_downloaded_once_into_the_cache_then_read_offline(server, tmp_path, capsys):
    assert download.cache_folder() == tmp_path / "cache" / "jax_nets_factory" / "datasets"
    with pytest.raises(UserError) as missing:  # nothing there, nothing asked: the command
        sources.load(DataConfig(name="cifar10"))
    assert str(missing.value) == (
        f"CIFAR-10: data.dir is unset and {NAME} is not in the cache ({download.cache_folder()}): "
        "download it with `python -m nets_training.download cifar10` (or --set "
        "data.download=true), or give your copy with --set data.dir=PATH"
    )
    assert download.main(["cifar10"]) == 0
    out, err = capsys.readouterr()
    assert out == f"{download.cache_folder() / NAME}\n"
    assert NAME in err and "100%" in err  # the progress bar
    assert cache_files() == [NAME]
    server.close()  # offline from here
    assert download.main(["cifar10"]) == 0  # found, not fetched
    assert capsys.readouterr().out == f"{download.cache_folder() / NAME}\n"
    for data in (DataConfig(name="cifar10"), DataConfig(name="cifar10", download=True)):
        ds = sources.load(data)
        assert (len(ds.train), len(ds.eval), ds.num_classes) == (20, 3, 10)
    assert server.downloads == {f"/files/{NAME}": 1}


def test_data_download_fetches_into_the_cache_or_data_dir(server, tmp_path):
    ds = sources.load(DataConfig(name="cifar10", download=True))
    assert (len(ds.train), len(ds.eval)) == (20, 3)
    assert cache_files() == [NAME]
    mine = tmp_path / "mine"  # a folder that does not exist yet: made, the archive put in it
    sources.load(DataConfig(name="cifar10", dir=str(mine), download=True))
    assert sorted(p.name for p in mine.iterdir()) == [NAME]
    named = tmp_path / "other" / NAME  # the archive's own path
    sources.load(DataConfig(name="cifar10", dir=str(named), download=True))
    assert named.is_file()
    sources.load(DataConfig(name="cifar10", dir=str(mine), download=True))  # there: no download
    assert server.downloads == {f"/files/{NAME}": 3}


@pytest.mark.parametrize(
    "fault, message",
    [
        ("corrupt", r"md5 [0-9a-f]{32} is not the published [0-9a-f]{32}; the download is corrupt"),
        ("short", r"stopped at \d+ of \d+ bytes"),
        ("size", r"\d+ bytes, not the published \d+ \(nothing was kept\)"),
        (
            "gone",
            r"cannot download http://127.0.0.1:\d+/files/cifar-10-python.tar.gz: .*no network",
        ),
    ],
)
def test_a_wrong_download_is_refused_in_one_line_and_leaves_nothing(
    server, monkeypatch, fault, message
):
    archive = download.ARCHIVES["cifar10"]
    if fault == "size":
        monkeypatch.setitem(
            download.ARCHIVES, "cifar10", download.Archive(archive.url, archive.md5, 1)
        )
    elif fault == "gone":
        server.close()
    else:
        getattr(server.faults, fault).add(NAME)
    with pytest.raises(download.DownloadError, match=message) as refused:
        sources.cifar(None, 10, download=True)
    assert "\n" not in str(refused.value)
    assert cache_files() == []  # no partial file, no wrong archive
