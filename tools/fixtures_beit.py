"""Parity fixtures of the BEiT family (see tools/parity.py for how to run it).

    PYTHONPATH=../shared/tools /tmp/torchenv/bin/python tools/fixtures_beit.py
    # full-size files for measure_parity.py's `check` (`--size=384`: at 384 px, the tables
    # resized as timm's loading resizes them):
    cd tools && PYTHONPATH=../../shared/tools /tmp/torchenv/bin/python fixtures_beit.py full \\
        /tmp/pbeit [--size=384] beit_base_patch16_224 ...
"""

import sys
from pathlib import Path

import parity
import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from safetensors.numpy import save_file
from timm.layers import resize_rel_pos_bias_table
from timm.models.beit import Beit, checkpoint_filter_fn, gen_relative_position_index  # noqa: E402

# The small configuration of every case: 32 px images of 4x4 patches of 8 pixels, two blocks
# of width 32 in two heads, relative position tables of 7 * 7 + 3 rows, as timm's beit networks
# set the rest.
SMALL = {
    "img_size": 32,
    "patch_size": 8,
    "embed_dim": 32,
    "depth": 2,
    "num_heads": 2,
    "use_abs_pos_emb": False,
    "use_rel_pos_bias": True,
    "init_values": 0.1,
}


def nontrivial(model: torch.nn.Module, unit_linears: bool = True) -> torch.nn.Module:
    """`model` with what `parity.perturb` leaves as timm initialises it drawn: the layer scales
    `gamma_1`, `gamma_2` ~U(0.5, 1.5) (perturb draws those named `gamma`; at 0.1 or 1e-5 the
    blocks would hardly reach the logits), the attention's `q_bias` and `v_bias` ~N(0, 0.1) and
    the relative position tables ~N(0, 1) (timm's zeros), the class token ~N(0, 0.5); the Linear
    weights ~N(0, 1 / fan_in) (`unit_linears`; else the head's only, timm's at a thousandth of
    its init), so that GELU's curve and the head count."""
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            leaf = name.rpartition(".")[2]
            if leaf in ("gamma_1", "gamma_2"):
                tensor.uniform_(0.5, 1.5)
            elif leaf in ("q_bias", "v_bias"):
                tensor.normal_(0.0, 0.1)
            elif leaf == "relative_position_bias_table":
                tensor.normal_(0.0, 1.0)
        linears = model.modules() if unit_linears else [model.head]
        for module in linears:
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, module.in_features**-0.5)
        model.cls_token.normal_(0.0, 0.5)
    return model


def small(**kwargs) -> torch.nn.Module:
    return nontrivial(Beit(**{"num_classes": 10, **SMALL, **kwargs}))


class Resized(torch.nn.Module):
    """`network`'s weights (its state dict is the file) evaluated as timm evaluates them in
    `resized`, the same network built for another image size: loaded through timm's
    `checkpoint_filter_fn`, which resizes the relative position tables
    (`resize_rel_pos_bias_table`)."""

    def __init__(self, network: torch.nn.Module, resized: torch.nn.Module):
        super().__init__()
        self.inner = network
        self.__dict__["resized"] = resized  # not a submodule: its weights are the file's

    @property
    def patch_embed(self) -> torch.nn.Module:
        """The resized network's: measure_parity.py takes the image size from it."""
        return self.resized.patch_embed

    def state_dict(self, *args, **kwargs):
        return self.inner.state_dict(*args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor | None:
        if self.training:  # parity.perturb's calibration passes: no BatchNorm to calibrate
            return None
        self.resized.load_state_dict(checkpoint_filter_fn(self.inner.state_dict(), self.resized))
        return self.resized.eval()(x)


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    "beit_config": ("beit_base_patch16_224", small, 32),
    # 32x48 images: the 4x4 grid's tables resized to 4x6 (rows 7 -> 7, columns 7 -> 11), as
    # timm loads the 32-px file into a network built for 32x48. The rows too move: timm's
    # geometric positions at their floor ratio 1.01 are not the offsets.
    "beit_resized_32x48": (
        "beit_base_patch16_224",
        lambda: Resized(small(), Beit(**{"num_classes": 10, **SMALL, "img_size": (32, 48)})),
        (32, 48),
    ),
}

FULL_SIZE = [
    "beit_base_patch16_224",
    "beit_base_patch16_384",
    "beit_large_patch16_224",
    "beit_large_patch16_384",
    "beit_large_patch16_512",
    "beitv2_base_patch16_224",
    "beitv2_large_patch16_224",
]


# timm's index for a 4x6 grid of patches, and a table for 4x4 (7 * 7 + 3 rows, 2 heads) resized
# to 4x6, 6x6 and 3x3 grids, which the tests compare with `nets.beit`'s.
TABLE_GRIDS = {"4x6": (4, 6), "6x6": (6, 6), "3x3": (3, 3)}


def write_tables() -> None:
    table = torch.randn(7 * 7 + 3, 2, generator=torch.Generator().manual_seed(0))
    out = {"index_4x6": gen_relative_position_index((4, 6)).int().numpy(), "table": table.numpy()}
    for name, (h, w) in TABLE_GRIDS.items():
        shape = ((2 * h - 1) * (2 * w - 1) + 3, 2)
        out[f"table_{name}"] = resize_rel_pos_bias_table(table, (h, w), shape).numpy()
    save_file(out, parity.ROOT / "parity" / "beit_resized_32x48" / "tables.safetensors")


def full(folder: Path, names: list[str], size: int | None = None) -> None:
    """measure_parity.py's `make` on timm's networks made `nontrivial` (the head's weights
    drawn, not the other Linears'); with `size`, each network's files evaluated at `size` as
    timm's loading into a network built for it evaluates them (`Resized`)."""
    import measure_parity

    create = timm.create_model

    def made(name: str, **kwargs) -> torch.nn.Module:
        model = nontrivial(create(name, **kwargs), unit_linears=False)
        return model if size is None else Resized(model, create(name, img_size=size))

    timm.create_model = made
    measure_parity.make(folder, names)


if __name__ == "__main__":
    if sys.argv[1:2] == ["full"]:  # full FOLDER [--size=N] NAMES...
        names = sys.argv[3:]
        size = int(names.pop(0).removeprefix("--size=")) if names[0].startswith("--") else None
        full(Path(sys.argv[2]), names, size)
        sys.exit()
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=32)
    write_tables()
    write_index("beit", FULL_SIZE)
