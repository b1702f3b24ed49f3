"""Weights by name: a timm / Hub name through `huggingface_hub`, and a URL, each downloaded once
into its standard cache from a server on 127.0.0.1 (tests/local_hub.py), then used offline; the
download computes the reference's logits; every failure is one line and leaves nothing
half-written, and the next call works once the cause is gone."""

import errno
import hashlib
import os
from pathlib import Path

import jax
import numpy as np
import pytest
from huggingface_hub import constants, file_download
from huggingface_hub.utils import _http as hf_http
from safetensors.numpy import load_file, save_file

import nets_factory
import nets_weights
from nets_weights import WeightFileError, published, urls
from tests.local_hub import LocalHub
from tests.test_pretrained import FIXTURES, expected, relative_error

CASE = FIXTURES / "parity" / "resnet_basic"  # timm's resnet18 at a small size
SMALL = {"stage_sizes": (2, 1, 1, 1), "num_filters": 8}


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A local Hub serving `timm/resnet18.a1_in1k`, and every cache in `tmp_path`."""
    server = LocalHub()
    server.add_repository("timm/resnet18.a1_in1k", CASE)
    monkeypatch.setattr(constants, "ENDPOINT", server.url)  # what HF_ENDPOINT sets at import
    monkeypatch.setattr(
        constants,
        "HUGGINGFACE_CO_URL_TEMPLATE",
        server.url + "/{repo_id}/resolve/{revision}/{filename}",
    )
    monkeypatch.setattr(hf_http.time, "sleep", lambda seconds: None)  # the client's retry waits
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    for name in ("XDG_CACHE_HOME", "TORCH_HOME", "KERAS_HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    yield server
    server.close()


def logits_error(network_fn, variables) -> float:
    reference = expected("resnet_basic")
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    return relative_error(logits, reference["logits"])


def cached_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_timm_name_downloads_once_computes_the_reference_and_works_offline(hub, monkeypatch):
    network_fn, variables = nets_factory.load_pretrained("resnet18.a1_in1k", **SMALL)
    assert logits_error(network_fn, variables) <= 1e-4
    assert network_fn.name == "resnet18" and network_fn.module.padding == "SYMMETRIC"
    assert sorted(hub.downloads.values()) == [1, 1]  # config.json and model.safetensors
    # The same repository by its Hub name, keras-hub's spelling, and offline: the cache alone.
    for spec in ("hf-hub:timm/resnet18.a1_in1k", "hf://timm/resnet18.a1_in1k"):
        assert nets_factory.load_pretrained(spec, **SMALL)[1] is not None
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    _, offline = nets_factory.load_pretrained("resnet18", "resnet18.a1_in1k", **SMALL)
    hub.close()  # and with the server gone
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    _, gone = nets_factory.load_pretrained("resnet18.a1_in1k", local_files_only=True, **SMALL)
    assert sorted(hub.downloads.values()) == [1, 1]  # nothing downloaded twice
    for other in (offline, gone):
        jax.tree.map(np.testing.assert_array_equal, other, variables)


def test_a_revision_pins_the_weights_it_names(hub, tmp_path):
    first = hub.repositories["timm/resnet18.a1_in1k"].refs["main"]
    changed = tmp_path / "changed"
    changed.mkdir()
    tensors = load_file(CASE / "model.safetensors")
    tensors["fc.bias"] = tensors["fc.bias"] + 1.0
    save_file(tensors, changed / "model.safetensors")
    (changed / "config.json").write_bytes((CASE / "config.json").read_bytes())
    hub.add_repository("timm/resnet18.a1_in1k", changed)  # the new `main`
    newest = nets_factory.load_pretrained("resnet18.a1_in1k", **SMALL)
    pinned = nets_factory.load_pretrained("resnet18.a1_in1k", revision=first, **SMALL)
    assert logits_error(*pinned) <= 1e-4 and logits_error(*newest) > 1e-2
    with pytest.raises(WeightFileError, match=r"^timm/resnet18.a1_in1k has no revision 'v9'$"):
        nets_factory.load_pretrained("resnet18.a1_in1k", revision="v9", **SMALL)


def test_failures_are_one_line_and_leave_nothing_half_written(hub, tmp_path, monkeypatch):
    def refused(spec, pattern, **kwargs):
        with pytest.raises(WeightFileError, match=pattern) as raised:
            nets_factory.load_pretrained(spec, **SMALL, **kwargs)
        assert "\n" not in str(raised.value)

    refused("resnet18.a2_in1k", r"no Hub repository timm/resnet18.a2_in1k .*close matches: ")
    refused("resnet18.a1_in1k", r"offline mode .* forbids", local_files_only=True)
    # A corrupt body (its sha256 is not the Hub's) and a short one: refused, nothing kept.
    for fault in (hub.faults.corrupt, hub.faults.short):
        fault.add("model.safetensors")
        refused("resnet18.a1_in1k", r"hash the Hub published|size")
        fault.clear()
        blobs = [f for f in cached_files(tmp_path / "hf") if "/blobs/" in f]
        assert all(len(Path(b).name) == 40 for b in blobs), blobs  # config.json's alone

    # A full disk: one line naming the cache; the partial download is removed.
    def no_space(url, temp_file, **kwargs):
        temp_file.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(file_download, "http_get", no_space)
        refused("resnet18.a1_in1k", r"No space left on device \(the Hub cache: ")
    assert not [f for f in cached_files(tmp_path / "hf") if f.endswith(".incomplete")]
    # Every cause gone: the same call works, and computes the reference.
    assert logits_error(*nets_factory.load_pretrained("resnet18.a1_in1k", **SMALL)) <= 1e-4
    hub.close()
    waits = []
    monkeypatch.setattr(hf_http.time, "sleep", waits.append)  # the client's waits between retries
    refused("resnet34.a1_in1k", r"cannot reach the Hub .* no network")
    assert waits == []  # at once, not after the client's 5 retries of 1 + 2 + 4 + 8 + 8 s


def test_a_url_downloads_once_into_its_cache_with_its_hash_checked(hub, tmp_path, monkeypatch):
    data = (CASE / "model.safetensors").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    good, bad = f"resnet18-{digest[:8]}.safetensors", "resnet18-0badc0de.safetensors"
    hub.files.update({good: data, bad: data})
    url = f"{hub.url}/files/{good}"
    network_fn, variables = nets_factory.load_pretrained("resnet18", url, **SMALL)
    assert logits_error(network_fn, variables) <= 1e-4
    folder = tmp_path / "xdg_cache_home" / "jax_nets_factory" / "weights"
    assert os.listdir(folder) == [good]
    umask = os.umask(0)
    os.umask(umask)
    assert (folder / good).stat().st_mode & 0o777 == 0o666 & ~umask
    hub.close()
    nets_factory.load_pretrained("resnet18", url, **SMALL)  # the cache, with no server
    assert hub.downloads[f"/files/{good}"] == 1


def test_url_failures_are_one_line_and_the_cache_stays_clean(hub, tmp_path, monkeypatch):
    data = (CASE / "model.safetensors").read_bytes()
    name = f"resnet18-{hashlib.sha256(data).hexdigest()[:10]}.safetensors"
    hub.files.update({name: data, "resnet18-0badc0de.safetensors": data})
    folder = urls.cache_folder(name)

    def refused(url, pattern, kept=()):
        with pytest.raises(WeightFileError, match=pattern) as raised:
            nets_factory.load_pretrained("resnet18", url, **SMALL)
        assert "\n" not in str(raised.value)
        assert not folder.exists() or os.listdir(folder) == list(kept)

    refused(f"{hub.url}/files/resnet18-0badc0de.safetensors", r"sha256 .* is not the published")
    refused(f"{hub.url}/files/missing-12345678.safetensors", r"HTTP 404")
    hub.faults.short.add(name)
    refused(f"{hub.url}/files/{name}", r"cannot download .*|stopped at")
    hub.faults.short.clear()
    with monkeypatch.context() as patch:
        patch.setattr(urls.os, "replace", no_space_left)
        refused(f"{hub.url}/files/{name}", rf"cannot save .* into {folder}: No space left")
    nets_factory.load_pretrained("resnet18", f"{hub.url}/files/{name}", **SMALL)
    hub.close()
    refused(
        f"{hub.url}/files/resnet18-12345678.safetensors", r"cannot download .*no network", [name]
    )


def no_space_left(*args):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_each_library_cache_holds_its_own_files(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    assert urls.cache_folder("resnet18-f37072fd.pth") == tmp_path / "torch/hub/checkpoints"
    assert urls.cache_folder("mobilenet_1_0_224_tf.h5") == tmp_path / "keras/models"
    assert urls.expected_hash("https://x/resnet18-f37072fd.pth") == ("sha256", "f37072fd")


def test_a_keras_file_is_checked_against_its_registry_hash(hub, tmp_path, monkeypatch):
    data = (FIXTURES / "parity" / "keras_mobilenet" / "model.h5").read_bytes()
    hub.files["mobilenet_1_0_224_tf.h5"] = data
    url = f"{hub.url}/files/mobilenet_1_0_224_tf.h5"
    folder = tmp_path / "keras_home" / "models"
    registry = {url: ("md5", "0" * 32)}  # as catalogue.tsv gives Keras's own hashes
    monkeypatch.setattr(urls.catalogue, "hash_of", registry.get)
    with pytest.raises(WeightFileError, match=r"md5 [0-9a-f]{32} is not the published 0{32}"):
        urls.download(url)
    assert os.listdir(folder) == []
    registry[url] = ("md5", hashlib.md5(data).hexdigest())
    assert urls.download(url) == folder / "mobilenet_1_0_224_tf.h5"


def test_fine_tuning_starts_from_weights_by_name(hub):
    from nets_training import config, loop

    cfg = config.load(
        config.DEFAULT,
        [
            "model.name=resnet18",
            "model.kwargs={stage_sizes: [2, 1, 1, 1], num_filters: 8}",
            "finetune.init_from=resnet18.a1_in1k",
        ],
    )
    cfg = loop.with_weight_conventions(cfg)
    assert cfg.model.kwargs["padding"] == "SYMMETRIC"  # the weights' convention, by name
    train_fn = nets_factory.get_network_fn("resnet18", 10, is_training=True, **cfg.model.kwargs)
    images = jax.ShapeDtypeStruct((1, 32, 32, 3), np.float32)
    abstract = jax.eval_shape(train_fn.init, jax.random.key(0), images)
    filled, fresh, _ = nets_weights.fill(
        "resnet18", "resnet18.a1_in1k", train_fn, abstract, nets_factory.networks_map
    )
    _, reference = nets_factory.load_pretrained("resnet18.a1_in1k", **SMALL)
    assert fresh == [] and sorted(hub.downloads.values()) == [1, 1]
    # The same arrays; `fill` (what training starts from) leaves out the conventions' mark.
    jax.tree.map(np.testing.assert_array_equal, filled, published.without_mark(reference))
