"""nets_weights.catalogue: the published weights by name (catalogue.tsv, written by
tools/catalogue.py), read without the network: every row loads as a known architecture, every
download can be checked, and a file is recognised by its name alone."""

import re
from collections import Counter

import pytest

import nets_factory
from nets_weights import catalogue
from nets_weights.architectures import ARCHITECTURES

ENTRIES = catalogue.entries()
TORCHVISION = [e for e in ENTRIES if e.weights.startswith("https://download.pytorch.org/")]
KERAS = [e for e in ENTRIES if e.weights.startswith("https://storage.googleapis.com/")]
TIMM = [e for e in ENTRIES if "/" not in e.weights]
CIFAR = [e for e in ENTRIES if "/akamaster/pytorch_resnet_cifar10/" in e.weights]
RESNET18 = "https://download.pytorch.org/models/resnet18-f37072fd.pth"
INCEPTION_V3_KERAS = (
    "https://storage.googleapis.com/tensorflow/keras-applications/inception_v3/"
    "inception_v3_weights_tf_dim_ordering_tf_kernels.h5"
)


def test_every_row_is_of_one_source_and_loads_as_a_known_architecture():
    assert len(TIMM) + len(TORCHVISION) + len(KERAS) + len(CIFAR) == len(ENTRIES)
    assert {e.architecture for e in ENTRIES} <= set(ARCHITECTURES)
    assert len({e.weights for e in ENTRIES}) == len(ENTRIES)
    # A downloaded file is recognised by its basename: no two published files share one.
    names = [e.weights.rsplit("/", 1)[1] for e in TORCHVISION + KERAS + CIFAR]
    assert len(set(names)) == len(names)


def test_the_headers_counts_are_its_sections_in_order():
    # tools/catalogue.py rewrites one source's rows by these counts: a section misplaced would
    # hand its rows to another source.
    lines = catalogue._FILE.read_text().splitlines()
    counts = [re.fullmatch(r"#   (.+): (\d+)", line) for line in lines]
    rows = [line.split("\t")[0] for line in lines if line and not line.startswith("#")][1:]
    of_source = {
        "timm ": lambda w: "/" not in w,
        "torchvision ": lambda w: w.startswith("https://download.pytorch.org/"),
        "Keras Applications ": lambda w: w.startswith("https://storage.googleapis.com/"),
        "akamaster/": lambda w: "/akamaster/" in w,
    }
    start = 0
    for source, count in [(m.group(1), int(m.group(2))) for m in counts if m]:
        (belongs,) = [test for prefix, test in of_source.items() if source.startswith(prefix)]
        assert all(map(belongs, rows[start : start + count])), source
        start += count
    assert start == len(rows)


def test_row_counts():
    # tools/catalogue.py's run on timm 1.0.31, torchvision 0.29.1, keras 3.16.0 / tf-keras 2.21.0:
    # 278 + 82 + 61, and Idelbayev's README's 5 CIFAR ResNets (resnet1202 has no network here).
    # A new release may add some; a large drop means a broken generator.
    assert len(TIMM) >= 240 and len(TORCHVISION) >= 80
    assert sorted(e.architecture for e in CIFAR) == [f"resnet{n}" for n in (110, 20, 32, 44, 56)]
    # Keras's files by folder: MobileNet 4 widths x 4 sizes, V2 0.35 and 1.0 x 5 sizes and 1.4
    # at 224, DenseNet 121/169/201, EfficientNet B0-B7 (in the bucket's root), V2 S/M/L, ...
    folders = Counter(e.weights.split("/")[-2] for e in KERAS)
    assert folders == {
        "mobilenet": 16,
        "mobilenet_v2": 11,
        "inception_v3": 1,
        "inception_resnet_v2": 1,
        "nasnet": 2,
        "densenet": 3,
        "keras-applications": 8,
        "efficientnet_v2": 3,
        "convnext": 4,
        "regnet": 12,
    }


def test_every_network_with_an_architecture_has_published_weights():
    networks = {arch.network for arch in ARCHITECTURES.values()}
    catalogued = {ARCHITECTURES[e.architecture].network for e in ENTRIES}
    # timm's own efficientnetv2_* and convnextv2_small have untrained configs only; Keras's and
    # torchvision's V2 files load into other networks (tf_efficientnetv2_*, efficientnet_v2_*).
    untrained = {"efficientnetv2_s", "efficientnetv2_m", "efficientnetv2_l", "convnextv2_small"}
    # timm's MLP-Mixer family: S/16, S/32, B/32, L/32, gMixer-12, gMLP-Ti and B are untrained.
    untrained |= {f"mixer_{size}_224" for size in ("s16", "s32", "b32", "l32")}
    untrained |= {"gmixer_12_224", "gmlp_ti16_224", "gmlp_b16_224"}
    # timm's CSPNet family: eight of its 23 configurations are untrained.
    untrained |= {"cspresnet50d", "cspresnet50w", "darknet17", "darknet21", "sedarknet21"}
    untrained |= {"cs3darknet_s", "cs3darknet_focus_x", "cs3sedarknet_xdw"}
    # timm's dpn48b is untrained.
    untrained |= {"dpn48b"}
    # timm's rexnetr_100, 130 and 150 are untrained.
    untrained |= {"rexnetr_100", "rexnetr_130", "rexnetr_150"}
    # timm's legacy_xception weights are a GitHub release's `.pth`, on no Hub repository: they
    # load from the downloaded file.
    # MobileCLIP-S1's image tower is on Apple's Hub repository alone (apple/mobileclip_s1_timm,
    # not timm's namespace, which the catalogue reads): it loads from there, or a folder.
    off_hub = {"legacy_xception", "fastvit_mci1"}
    assert networks - catalogued == untrained | off_hub


def test_timm_names_are_hub_repositories_the_hub_checks():
    assert all(re.fullmatch(r"[a-z0-9_]+\.[a-z0-9_]+", e.weights) for e in TIMM)
    assert not any(e.hash for e in TIMM)


def test_torchvision_files_carry_their_hash_prefix():
    for entry in TORCHVISION + CIFAR:
        assert re.search(r"-[0-9a-f]{8,}\.p?th$", entry.weights), entry.weights
        assert entry.hash == "" and catalogue.hash_of(entry.weights) is None


def test_keras_files_have_keras_hash_but_mobilenets():
    for entry in KERAS:
        assert entry.weights.endswith(".h5") and "notop" not in entry.weights
        if re.search(r"/mobilenet(_v2)?/", entry.weights):  # Keras checks no MobileNet file
            assert entry.hash == ""
        else:
            algorithm, digest = catalogue.hash_of(entry.weights)
            assert {"md5": 32, "sha256": 64}[algorithm] == len(digest), entry
            assert re.fullmatch(r"[0-9a-f]+", digest)
    assert catalogue.hash_of(INCEPTION_V3_KERAS) == ("md5", "9a0d58056eeedaa3f26cb7ebd46da564")


def test_weights_for_a_network_include_every_source_and_twins():
    named = catalogue.for_network("resnet50", nets_factory.networks_map)
    torchvision = [e.weights for e in TORCHVISION if "/resnet50-" in e.weights]
    assert "resnet50.a1_in1k" in named and len(torchvision) == 2
    assert set(torchvision) <= set(named)
    assert all(ARCHITECTURES[catalogue.architecture_of(w)].network == "resnet50" for w in named)
    # DeiT's weights load into our ViT: one constructor under both names.
    assert "deit_base_patch16_224.fb_in1k" in catalogue.for_network(
        "vit_base_patch16_224", nets_factory.networks_map
    )
    # Keras's files name our registry's networks through their own keys.
    assert INCEPTION_V3_KERAS in catalogue.for_network("inception_v3", nets_factory.networks_map)
    assert catalogue.for_network("no_such_network", nets_factory.networks_map) == []


@pytest.mark.parametrize(
    ("weights", "architecture"),
    [
        ("resnet50.a1_in1k", "resnet50"),
        ("inception_v3.tf_in1k", "inception_v3.tf_in1k"),  # timm's tagged key
        (RESNET18, "resnet18"),
        ("resnet18-f37072fd.pth", "resnet18"),
        ("/root/.cache/torch/hub/checkpoints/resnet18-f37072fd.pth", "resnet18"),
        ("NASNet-mobile.h5", "keras_nasnet_mobile"),
        (INCEPTION_V3_KERAS, "keras_inception_v3"),
        ("resnet18-00000000.pth", None),
        ("resnet50.no_such_tag", None),
    ],
)
def test_architecture_of_a_name_url_or_file(weights, architecture):
    assert catalogue.architecture_of(weights) == architecture


def test_entries_are_a_copy():
    catalogue.entries().clear()
    assert catalogue.entries() == ENTRIES
