"""Parity fixtures of the Swin Transformer family (see tools/parity.py for how to run it).

The cases are timm's own `SwinTransformer` in a small configuration: 8 channels after 4x4
patches, stages of (2, 2, 1, 1) blocks with (1, 2, 2, 4) heads, windows of 4 set for 64 px
images (grids 16, 8, 4, 2: the first two stages shift their windows, the third's map is one
window and the last's shrinks it to 2x2, neither shifting). `swin` runs at those 64 px; the
second, with timm's `dynamic_img_size=True`, at 88 px, whose maps (22, 11, 6, 3) are not window
multiples: each block pads them after the roll and builds the mask for the padded map, and the
odd 11 is padded before merging. The relative position bias tables are drawn ~N(0, 1) (timm
starts them at ~0.02, which would hide a wrong index) besides tools/parity.py's perturbation.

torchvision is not installed here, so its case is `TorchvisionSwin` below: torchvision's
`torchvision/models/swin_transformer.py` (V1: `PatchMerging`, `shifted_window_attention`,
`ShiftedWindowAttention`, `SwinTransformerBlock`, `SwinTransformer`, and `ops.misc.MLP`) rebuilt
with plain torch.nn, the same nesting (so the same state-dict keys, the persistent
`relative_position_index` buffers included) and the same forward pass. It runs at 64 px with
windows of 2, where every map is a window multiple and the last one window (as Swin-T's at
224 px): there torchvision's function is timm's.
"""

import torch
import torch.nn.functional as F
from fixtures_convnext import Permute  # noqa: E402  (torchvision's ops.misc.Permute)
from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.swin_transformer import SwinTransformer, get_relative_position_index  # noqa: E402
from torch import nn

SMALL = {
    "img_size": 64,
    "embed_dim": 8,
    "depths": (2, 2, 1, 1),
    "num_heads": (1, 2, 2, 4),
    "window_size": 4,
}


def small(**kwargs) -> torch.nn.Module:
    model = SwinTransformer(num_classes=10, drop_path_rate=0.0, **SMALL, **kwargs)
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if name.endswith("relative_position_bias_table"):
                tensor.normal_(0.0, 1.0)
    return model


class PatchMerging(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim, eps=1e-5)

    def forward(self, x):
        h, w = x.shape[-3:-1]
        x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
        x0, x1 = x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :]
        x2, x3 = x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]
        return self.reduction(self.norm(torch.cat([x0, x1, x2, x3], -1)))


class ShiftedWindowAttention(nn.Module):
    """torchvision's, with its `shifted_window_attention` as the forward pass (evaluation)."""

    def __init__(self, dim, window_size, shift_size, num_heads):
        super().__init__()
        self.window_size, self.shift_size, self.num_heads = window_size, shift_size, num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        area = (2 * window_size[0] - 1) * (2 * window_size[1] - 1)
        self.relative_position_bias_table = nn.Parameter(torch.zeros(area, num_heads))
        index = get_relative_position_index(*window_size).flatten()  # torchvision's, the same
        self.register_buffer("relative_position_index", index)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def forward(self, x):
        ws, shift, heads = self.window_size, list(self.shift_size), self.num_heads
        n = ws[0] * ws[1]
        bias = self.relative_position_bias_table[self.relative_position_index]
        bias = bias.view(n, n, -1).permute(2, 0, 1).unsqueeze(0)
        b, h, w, c = x.shape
        x = F.pad(x, (0, 0, 0, (ws[1] - w % ws[1]) % ws[1], 0, (ws[0] - h % ws[0]) % ws[0]))
        _, ph, pw, _ = x.shape
        shift = [0 if ws[i] >= (ph, pw)[i] else shift[i] for i in range(2)]
        if sum(shift) > 0:
            x = torch.roll(x, shifts=(-shift[0], -shift[1]), dims=(1, 2))
        windows = (ph // ws[0]) * (pw // ws[1])
        x = x.view(b, ph // ws[0], ws[0], pw // ws[1], ws[1], c)
        x = x.permute(0, 1, 3, 2, 4, 5).reshape(b * windows, n, c)
        qkv = self.qkv(x).reshape(x.size(0), n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * (c // heads) ** -0.5, qkv[1], qkv[2]
        attn = q.matmul(k.transpose(-2, -1)) + bias
        if sum(shift) > 0:
            mask = x.new_zeros((ph, pw))
            count = 0
            for hs in ((0, -ws[0]), (-ws[0], -shift[0]), (-shift[0], None)):
                for wsl in ((0, -ws[1]), (-ws[1], -shift[1]), (-shift[1], None)):
                    mask[hs[0] : hs[1], wsl[0] : wsl[1]] = count
                    count += 1
            mask = mask.view(ph // ws[0], ws[0], pw // ws[1], ws[1]).permute(0, 2, 1, 3)
            mask = mask.reshape(windows, n)
            mask = mask.unsqueeze(1) - mask.unsqueeze(2)
            mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
            attn = attn.view(b, windows, heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, heads, n, n)
        x = F.softmax(attn, dim=-1).matmul(v).transpose(1, 2).reshape(x.size(0), n, c)
        x = self.proj(x).view(b, ph // ws[0], pw // ws[1], ws[0], ws[1], c)
        x = x.permute(0, 1, 3, 2, 4, 5).reshape(b, ph, pw, c)
        if sum(shift) > 0:
            x = torch.roll(x, shifts=(shift[0], shift[1]), dims=(1, 2))
        return x[:, :h, :w, :].contiguous()


class SwinTransformerBlock(nn.Module):
    def __init__(self, dim, num_heads, window_size, shift_size):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = ShiftedWindowAttention(dim, window_size, shift_size, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-5)
        # ops.misc.MLP(dim, [4 dim, dim], GELU): Linear, GELU, Dropout, Linear, Dropout.
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(), nn.Linear(4 * dim, dim), nn.Dropout()
        )

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TorchvisionSwin(nn.Module):
    """torchvision.models.swin_transformer.SwinTransformer (V1) for 4x4 patches."""

    def __init__(self, embed_dim, depths, num_heads, window_size, num_classes=1000):
        super().__init__()
        layers = [
            nn.Sequential(
                nn.Conv2d(3, embed_dim, 4, stride=4), Permute([0, 2, 3, 1]), nn.LayerNorm(embed_dim)
            )
        ]
        for i, depth in enumerate(depths):
            dim = embed_dim * 2**i
            shift = [w // 2 for w in window_size]
            layers.append(
                nn.Sequential(
                    *[
                        SwinTransformerBlock(
                            dim, num_heads[i], window_size, [0, 0] if j % 2 == 0 else shift
                        )
                        for j in range(depth)
                    ]
                )
            )
            if i < len(depths) - 1:
                layers.append(PatchMerging(dim))
        self.features = nn.Sequential(*layers)
        width = embed_dim * 2 ** (len(depths) - 1)
        self.norm = nn.LayerNorm(width, eps=1e-5)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):
        x = self.norm(self.features(x))
        return self.head(x.mean((1, 2)))


TV_SMALL = {
    "embed_dim": 8,
    "depths": (2, 2, 1, 1),
    "num_heads": (1, 2, 2, 4),
    "window_size": [2, 2],
}


def small_torchvision() -> nn.Module:
    model = TorchvisionSwin(**TV_SMALL, num_classes=10)
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if name.endswith("relative_position_bias_table"):
                tensor.normal_(0.0, 1.0)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments (SMALL).
CASES = {
    "swin": ("swin_tiny_patch4_window7_224", small, 64),
    "swin_padded_88": (
        "swin_tiny_patch4_window7_224",
        lambda: small(dynamic_img_size=True),
        88,
    ),
    "tv_swin": ("swin_t", small_torchvision, 64),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert: timm's, and
# torchvision's layout (`[name torchvision]`).
NAMES = [f"swin_{size}_patch4_window7_224" for size in ("tiny", "small", "base")]
TORCHVISION = {
    "swin_t torchvision": (96, (2, 2, 6, 2), (3, 6, 12, 24)),
    "swin_b torchvision": (128, (2, 2, 18, 2), (4, 8, 16, 32)),
}


def create(name: str) -> nn.Module:
    if name in TORCHVISION:
        return TorchvisionSwin(*TORCHVISION[name], window_size=[7, 7])
    return timm.create_model(name, pretrained=False)


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("swin", NAMES + list(TORCHVISION), create)
