"""timm's parameter groups of layer-wise learning-rate decay, the reference `optim.layer_decay` and
the decoupled decay's mask are tested against (tests/test_layer_decay.py).

    PYTHONPATH=../shared/tools /tmp/torchenv/bin/python tools/fixtures_layer_decay.py

Written with torch 2.13.0 (CPU) and timm 1.0.31. For each network, built without weights at 1000
classes: `timm.optim.param_groups_layer_decay(model, weight_decay=0.05, layer_decay=0.75,
no_weight_decay_list=model.no_weight_decay())`, as timm's `create_optimizer_v2` calls it, and
every parameter's `[shape, lr_scale, decayed]` under its timm name, in
`tests/fixtures/layer_decay_timm.json`.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / ".." / "shared" / "tools"))
from timm_compat import import_timm  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "layer_decay_timm.json"
NETWORKS = [
    "vit_small_patch16_224",
    "convnext_tiny",
    "swin_tiny_patch4_window7_224",
    "beit_base_patch16_224",
    "maxvit_tiny_tf_224",
    "pvt_v2_b0",
    "tiny_vit_5m_224",
    "cait_xxs24_224",
    "levit_128s",
    "efficientformer_l1",
    "efficientformerv2_s0",
    "inception_next_atto",
    "mambaout_femto",
]
LAYER_DECAY, WEIGHT_DECAY = 0.75, 0.05


def groups(timm, name: str) -> dict[str, list]:
    """`{timm parameter name: [shape, lr_scale, decayed]}` of timm's layer-decay groups."""
    from timm.optim._param_groups import param_groups_layer_decay

    # 1000 classes, as our variable trees: timm's TinyViTs default to ImageNet-22k's 21,841.
    model = timm.create_model(name, pretrained=False, num_classes=1000)
    no_decay = model.no_weight_decay() if hasattr(model, "no_weight_decay") else ()
    names = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for group in param_groups_layer_decay(model, WEIGHT_DECAY, no_decay, layer_decay=LAYER_DECAY):
        for param in group["params"]:
            decayed = group["weight_decay"] > 0
            out[names[id(param)]] = [list(param.shape), group["lr_scale"], decayed]
    return dict(sorted(out.items()))


def main() -> None:
    timm = import_timm()
    fixture = {
        "timm": timm.__version__,
        "layer_decay": LAYER_DECAY,
        "networks": {name: groups(timm, name) for name in NETWORKS},
    }
    OUT.write_text(one_line_per_parameter(fixture))


def one_line_per_parameter(fixture: dict) -> str:
    """`fixture` as JSON with one parameter a line (diffs read per parameter)."""
    nets = ",\n".join(
        f"{json.dumps(net)}: {{\n"
        + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in params.items())
        + "\n}"
        for net, params in fixture["networks"].items()
    )
    head = {k: v for k, v in fixture.items() if k != "networks"}
    return json.dumps(head)[:-1] + ', "networks": {\n' + nets + "\n}}\n"


if __name__ == "__main__":
    main()
