"""Parity fixtures of the MaxViT family (see tools/parity.py for how to run it)."""

import torch
from parity import ROOT, timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from safetensors.numpy import save_file
from timm.models.maxxvit import MaxxVit, MaxxVitCfg, _tf_cfg  # noqa: E402


def small(img_size, ratio, embed_dim, depths, stem_width, dim_head) -> torch.nn.Module:
    """timm's `MaxxVit` in the TF ports' configuration (`_tf_cfg`: 'same' padding, BatchNorm
    epsilon 1e-3, GELU-tanh, `RelPosBiasTf`, heads interleaved) with `len(depths)` stages,
    windows and grids of `img_size // ratio` (timm's `partition_ratio`, 32 in its networks),
    heads of `dim_head` channels and a pre-logits layer as wide as the last stage; the relative
    position tables ~N(0, 0.5) (timm's std 0.02 would leave their offsets unseen in the
    logits)."""
    cfg = MaxxVitCfg(
        embed_dim=embed_dim,
        depths=depths,
        block_type=("M",) * len(depths),
        stem_width=stem_width,
        stem_bias=True,
        head_hidden_size=embed_dim[-1],
        **_tf_cfg(),
    )
    model = MaxxVit(
        cfg,
        img_size=img_size,
        num_classes=10,
        transformer_dim_head=dim_head,
        transformer_partition_ratio=ratio,
    )
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if name.endswith("relative_position_bias_table"):
                tensor.normal_(0.0, 0.5)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    # 3x3 windows and grids (img_size 24, ratio 8) on two stages' 6x6 and 3x3 maps: the first
    # stage as wide as the stem (its strided block's shortcut pooled, not widened) and two
    # blocks deep (the second unstrided), heads of 8 channels (2, then 3).
    "maxvit_tf_24": ("maxvit_tiny_tf_224", lambda: small(24, 8, (16, 24), (2, 1), 16, 8), 24),
    # 2x2 windows and grids (img_size 32, ratio 16) on 30 px images: the stem's map is 15, odd,
    # so the first shortcut's 'same' average pool pads it at the end (and counts the padding)
    # and the strided depthwise convolution pads a pixel each side; that shortcut is widened.
    "maxvit_tf_odd_30": ("maxvit_small_tf_384", lambda: small(32, 16, (12, 16), (1, 1), 8, 4), 30),
}

FULL_SIZE = [
    f"maxvit_{size}_tf_{res}"
    for size in ("tiny", "small", "base", "large", "xlarge")
    for res in (224, 384, 512)
]


def bias_lookup() -> None:
    """timm's `RelPosBiasTf.get_bias()` for a table of 2 heads over 2x3 windows, beside the table:
    the tests compare it with `nets.maxvit.relative_position_bias`."""
    from timm.layers import RelPosBiasTf

    rel_pos = RelPosBiasTf(window_size=(2, 3), num_heads=2)
    with torch.no_grad():
        rel_pos.relative_position_bias_table.copy_(torch.arange(2 * 3 * 5.0).reshape(2, 3, 5))
        bias = rel_pos.get_bias()
    tensors = {"table": rel_pos.relative_position_bias_table.detach(), "bias": bias}
    save_file(
        {k: v.numpy() for k, v in tensors.items()},
        ROOT / "parity" / "maxvit_tf_24" / "rel_pos.safetensors",
    )


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    bias_lookup()
    write_index("maxvit", FULL_SIZE, lambda name: timm.create_model(name, num_classes=1000))
