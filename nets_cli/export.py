"""Exports a trained or pretrained network for serving, as a serialized `jax.export` artifact
(StableHLO with its weights inside) that any process with `jax` runs, at any batch size
(`nets-export` when installed, `python export.py` in a checkout).

    nets-export --workdir=runs/r50 --out=r50.jaxexport          # the newest checkpoint
    nets-export --workdir=runs/r50 --step=900 --noema --out=r50-900.jaxexport
    nets-export --workdir=runs/r50 --best --out=r50.jaxexport   # its best evaluation's weights
    nets-export --weights=resnet50.a1_in1k --out=r50.jaxexport  # published weights, by name
    nets-export ... --input_dtype=float32 --probabilities --platforms=cpu,cuda

Serving it needs only jax:

    exported = jax.export.deserialize(open('r50.jaxexport', 'rb').read())
    logits = exported.call(images)   # uint8 [batch, size, size, 3]; see r50.jaxexport.json

Errors are one line on stderr.
"""

import sys

from absl import flags

from nets_cli import common

_WORKDIR = flags.DEFINE_string("workdir", None, "A training run's folder.")
_STEP = flags.DEFINE_integer(
    "step", None, "With --workdir: this checkpoint (default: newest).", lower_bound=0
)
_BEST = flags.DEFINE_bool(
    "best", False, "With --workdir: the weights of the run's best evaluation (<workdir>/best)."
)
_AVERAGED = flags.DEFINE_bool(
    "averaged", False, "With --workdir: the average nets-average wrote (<workdir>/averaged)."
)
_EMA = flags.DEFINE_bool("ema", True, "With --workdir: the EMA weights, when the run kept them.")
_MODEL = flags.DEFINE_string(
    "model", None, "With --weights: the network, where the weights do not say (a .pth file)."
)
_WEIGHTS = flags.DEFINE_string(
    "weights", None, "Published weights: a file, a Hub folder, a Hub name or a URL."
)
_OUT = flags.DEFINE_string("out", None, "The artifact to write (and OUT.json beside it).")
_INPUT = flags.DEFINE_enum("input_dtype", "uint8", ["uint8", "float32"], "[0, 255] or [0, 1].")
_PROBABILITIES = flags.DEFINE_bool("probabilities", False, "Also return the softmax.")
_PLATFORMS = flags.DEFINE_list("platforms", ["cpu"], "Where it may run: cpu, cuda, rocm, tpu.")


def main(argv: list[str]) -> None:
    common.start(argv)
    from nets_training.errors import UserError

    try:
        common.check_source(_WORKDIR.value, _WEIGHTS.value, _MODEL.value)
        kept = common.kept_weights(_BEST.value, _AVERAGED.value, _WEIGHTS.value, _STEP.value)
        common.require(_OUT, "the artifact to write, e.g. --out=r50.jaxexport")
        from nets_inference import export, load  # after the flags are checked: imports JAX

        options = export.Options(_INPUT.value, _PROBABILITIES.value, tuple(_PLATFORMS.value))
        if _WEIGHTS.value:
            network = load.from_weights(_MODEL.value, _WEIGHTS.value)
        else:
            network = load.from_workdir(_WORKDIR.value, _STEP.value, _EMA.value, kept=kept)
        exported = export.export(network, options)
        info = export.metadata(network, options, exported)
        path = export.write(_OUT.value, exported, info)
    except (UserError, ValueError) as e:
        print(f"{common.program()}: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # writing OUT (through a temporary file beside it: named as OUT)
        print(f"{common.program()}: {_OUT.value}: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)
    size = network.inputs.image_size
    print(
        f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB): {network.source}, "
        f"{_INPUT.value} [batch, {size}, {size}, {network.inputs.channels}] -> "
        f"{', '.join(info['outputs'])}"
    )


def run() -> None:
    """The `nets-export` console script."""
    common.run(main, __name__)


if __name__ == "__main__":
    run()
