"""Layer-wise learning-rate decay and the decoupled decay's mask against timm's parameter groups.

`tests/fixtures/layer_decay_timm.json` (tools/fixtures_layer_decay.py) holds, for every parameter
of timm's vit_small_patch16_224, convnext_tiny, swin_tiny_patch4_window7_224,
beit_base_patch16_224, maxvit_tiny_tf_224, pvt_v2_b0, tiny_vit_5m_224, cait_xxs24_224,
levit_128s, efficientformer_l1, efficientformerv2_s0, inception_next_atto and mambaout_femto, the
learning-rate scale `param_groups_layer_decay` gives it at layer_decay 0.75 and whether it is
decayed (BatchNorm statistics are no parameters of timm's). Our parameters are matched to timm's
by the published-weights converters (`nets_weights`, their renames included), and their scales
computed by `optim` from the networks' own depths, on the committed variable trees.
"""

import json
from pathlib import Path

import numpy as np
import optax
import pytest

import nets_factory
from nets_training import optim
from nets_training.config import OptimConfig
from nets_training.errors import UserError
from nets_weights import architectures, convert
from tests import variable_trees

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "layer_decay_timm.json").read_text())


@pytest.mark.parametrize("name", sorted(FIXTURE["networks"]))
def test_every_parameters_scale_and_decay_are_timms(name):
    timm = FIXTURE["networks"][name]
    arch = architectures.ARCHITECTURES[name]  # timm's key layout
    network_fn = nets_factory.get_network_fn(name, 1000)
    shapes = variable_trees.leaf_shapes(variable_trees.section(name))
    shapes = {path: shape for path, shape in shapes.items() if path[0] == "params"}  # no stats
    keys = arch.stable({key: key for key in timm})  # the names `layout` gives -> timm's
    sources = {name: tuple(timm[key][0]) for name, key in keys.items()}
    layout = arch.layout(network_fn.module)
    steps = convert.plan(sources, shapes, layout, framework=arch.framework)
    assert len(steps) == len(timm)  # every parameter, each matched once (plan raises otherwise)

    params = variable_trees.abstract(name)["params"]
    scales = optim.layer_scales(network_fn.module, params, FIXTURE["layer_decay"])
    decayed = optim.kernel_mask(params)
    for step in steps:
        _, scale, decay = timm[keys[step.source]]
        path = step.target[1:]  # without 'params'
        ours = _at(scales, path)
        assert ours == pytest.approx(scale, rel=1e-6), (step.source, path)
        assert _at(decayed, path) == decay, (step.source, path)


def _at(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def test_the_update_is_scaled_as_timms_learning_rate():
    # Plain SGD: an update is -lr * scale * gradient, whatever the depth.
    module = nets_factory.get_network_fn("vit_small_patch16_224", 10).module
    params = {
        "patch_embed": {"kernel": np.ones(2, np.float32)},
        "blocks_11": {"kernel": np.ones(2, np.float32)},
        "head": {"kernel": np.ones(2, np.float32)},
    }
    cfg = OptimConfig(name="sgd", lr=1.0, layer_decay=0.5)
    tx = optim.optimizer(cfg, optax.constant_schedule(1.0), module=module)
    updates, _ = tx.update(params, tx.init(params), params)
    got = {k: float(v["kernel"][0]) for k, v in updates.items()}
    assert got == {"patch_embed": -(0.5**13), "blocks_11": -0.5, "head": -1.0}


def test_a_network_without_depths_is_one_line():
    module = nets_factory.get_network_fn("resnet18", 10).module
    with pytest.raises(UserError, match=r"^optim.layer_decay=0.75: ResNet does not say its") as e:
        optim.optimizer(OptimConfig(layer_decay=0.75), optax.constant_schedule(1.0), (), module)
    valid = str(e.value).split("layer decay is for ")[1]  # the registry's modules that do
    assert "VisionTransformer, " in valid and "ConvNeXt, " in valid and "ResNet," not in valid
    assert optim.optimizer(OptimConfig(), optax.constant_schedule(1.0), (), module) is not None


def test_layer_decay_outside_0_1_is_refused():
    from nets_training import config

    for value in (0, 1.5, -0.1):
        with pytest.raises(UserError, match=r"^optim.layer_decay: must be in \(0, 1\], got"):
            config.from_dict({"optim": {"layer_decay": value}})
    assert config.from_dict({"optim": {"layer_decay": 1}}).optim.layer_decay == 1.0
