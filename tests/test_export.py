"""export.py: a trained run or published weights as a `jax.export` artifact that a process with
only jax runs, at any batch size, computing what `network_fn.apply` computes."""

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import nets_factory
from nets_inference import load

pytestmark = pytest.mark.slow  # export.py run as subprocesses on a trained run

ROOT = Path(__file__).resolve().parents[1]
KERAS_MOBILENET = ROOT / "tests" / "fixtures" / "parity" / "keras_mobilenet" / "model.h5"
# Runs the artifact where nothing of this project can be imported: only jax and numpy.
SERVE = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0].startswith("nets"):
            raise ImportError(f"the artifact needed {name}")
sys.meta_path.insert(0, Refuse())
import jax, numpy as np
exported = jax.export.deserialize(open(sys.argv[1], "rb").read())
images = np.load(sys.argv[2])
out = {}
for n in (1, len(images)):
    result = exported.call(images[:n])
    for name, value in zip(("logits", "probabilities"), jax.tree.leaves(result)):
        out[f"{name}{n}"] = np.asarray(value)
np.savez(sys.argv[3], **out)
"""


def run(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def serve(tmp_path, artifact, images):
    """The artifact's outputs at batch 1 and len(images), from a bare-jax process."""
    np.save(tmp_path / "images.npy", images)
    script = tmp_path / "serve.py"
    script.write_text(SERVE)
    # -I: no PYTHONPATH, no current folder on the path; the finder refuses the rest.
    paths = (artifact, tmp_path / "images.npy", tmp_path / "out.npz")
    result = run("-I", script, *paths, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return np.load(tmp_path / "out.npz")


@pytest.fixture(scope="module")
def workdir(tiny_run):
    """conftest's `tiny_run`, which eval.py's and export.py's tests share."""
    return tiny_run


@pytest.mark.cpu_only("the artifact is for the CPU (--platforms' default), served on this backend")
def test_a_runs_export_computes_its_logits_at_any_batch_size(tmp_path, workdir):
    # The weights of the run's best evaluation (--best), its only one: the newest checkpoint's.
    artifact = tmp_path / "digits.jaxexport"
    flags = [f"--workdir={workdir}", "--best", f"--out={artifact}", "--probabilities"]
    result = run("export.py", *flags)
    assert result.returncode == 0, result.stderr
    assert f"wrote {artifact}" in result.stdout and f"{workdir / 'best' / '3'} (" in result.stdout
    info = json.loads(Path(f"{artifact}.json").read_text())
    assert info["input"]["shape"] == ["batch", 8, 8, 1] and info["input"]["dtype"] == "uint8"
    assert info["outputs"] == ["logits", "probabilities"] and info["classes"] == 10

    images = np.random.default_rng(0).integers(0, 256, (3, 8, 8, 1), dtype=np.uint8)
    out = serve(tmp_path, artifact, images)
    network = load.from_workdir(workdir)
    x = (images / 255.0 - np.asarray(network.inputs.mean)) / np.asarray(network.inputs.std)
    expected, _ = jax.jit(network.network_fn.apply)(network.variables, x.astype(np.float32))
    scale = np.abs(expected).max()
    assert np.abs(out["logits3"] - expected).max() <= 1e-5 * scale
    assert np.abs(out["logits1"] - expected[:1]).max() <= 1e-5 * scale
    np.testing.assert_allclose(out["probabilities3"], jax.nn.softmax(expected), atol=1e-6)


@pytest.mark.cpu_only("the artifact is for the CPU (--platforms' default), served on this backend")
def test_published_weights_export_with_their_preprocessing(tmp_path):
    pytest.importorskip("h5py")
    artifact = tmp_path / "mobilenet.jaxexport"
    result = run(
        "export.py",
        "--model=mobilenet_v1_025",
        f"--weights={KERAS_MOBILENET}",
        f"--out={artifact}",
        "--input_dtype=float32",
    )
    assert result.returncode == 0, result.stderr
    images = np.random.default_rng(1).uniform(size=(2, 224, 224, 3)).astype(np.float32)
    out = serve(tmp_path, artifact, images)
    network_fn, variables = nets_factory.load_pretrained("mobilenet_v1_025", KERAS_MOBILENET)
    expected, _ = jax.jit(network_fn.apply)(variables, (images - 0.5) / 0.5)  # Keras's [-1, 1]
    assert np.abs(out["logits2"] - expected).max() <= 1e-5 * np.abs(expected).max()
    assert "probabilities2" not in out


# One case per stage where export.py's errors arise (the messages of the others: the next test).
@pytest.mark.parametrize(
    "flags, message",
    [
        # Before JAX is imported; the flag's description is main's own.
        (["--workdir=r"], "--out is required: the artifact to write, e.g. --out=r50.jaxexport\n"),
        # After, building the network: a ValueError (WeightFileError) rather than a UserError.
        (["--weights=w.safetensors", "--out=x"], "no such weight file or folder: w.safetensors"),
    ],
)
def test_bad_input_is_one_line(flags, message):
    result = run("export.py", *flags)
    assert result.returncode == 2 and result.stderr.startswith(f"export.py: {message}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_a_source_and_platforms_that_cannot_be_exported_are_one_line():
    from nets_cli import common
    from nets_inference import export
    from nets_training.errors import UserError

    def refused(make, *args):
        with pytest.raises(UserError) as error:
            make(*args)
        return str(error.value)

    assert refused(common.check_source, None, None, None) == (
        "give --workdir (a training run's folder) or --weights (published weights: a file, "
        "folder, Hub name or URL)"
    )
    assert refused(common.check_source, "r", "w", None) == (
        "give --workdir (a training run) or --weights, not both"
    )
    assert refused(common.check_source, "r", None, "resnet50") == (
        "--model is for --weights; the run in r is the network its config.yaml names"
    )
    common.check_source("r", None, None)
    common.check_source(None, "w", "resnet50")
    for flags, named in ((("w", None), "--weights"), ((None, 3), "--step")):
        assert refused(common.kept_weights, True, False, *flags) == (
            f"--best is the weights of a run's best evaluation: not with {named}"
        )
    assert refused(common.kept_weights, True, False, None, None, True).endswith("with --watch")
    assert common.kept_weights(True, False, None, None) == "best"
    assert common.kept_weights(False, True, None, None) == "averaged"
    assert refused(export.Options, "uint8", False, ("cpu", "bogus")) == (
        "--platforms: 'bogus': give some of cpu, cuda, rocm, tpu"
    )
    assert refused(load.from_workdir, "/no/such/run") == (
        "--workdir /no/such/run: no config.yaml there (not a training run's folder)"
    )


def test_a_missing_step_names_it_and_those_there_are(tmp_path, workdir):
    result = run("export.py", f"--workdir={workdir}", "--step=99", f"--out={tmp_path / 'x'}")
    assert result.returncode == 2
    assert result.stderr == (
        f"export.py: --step 99: {workdir} has no checkpoint 99; its checkpoints are steps 1, 2, "
        "3 (--step=3: the newest); --best reads its best evaluation's weights\n"
    )


def test_weights_without_a_classifier_export_their_features():
    from nets_inference import export
    from nets_training.errors import UserError
    from tests.test_pretrained_vit import DINOV2_SMALL, FIXTURES

    weights = FIXTURES / "parity" / "dinov2_reg_features_42"  # DINOv2's: no classifier
    network_fn, variables = nets_factory.load_pretrained(
        "vit_small_patch14_reg4_dinov2", weights, **DINOV2_SMALL
    )
    info = network_fn.pretrained
    inputs = load.Inputs(info.image_size, 3, info.mean, info.std, info.class_names)
    network = load.Network(network_fn, variables, inputs, str(weights))
    options = export.Options(input_dtype="float32")
    exported = export.export(network, options)
    written = export.metadata(network, options, exported)
    assert written["outputs"] == ["features"] and written["features"] == 32
    assert "classes" not in written and written["class_names"] == []
    images = np.random.default_rng(2).uniform(size=(2, 224, 224, 3)).astype(np.float32)
    features, _ = jax.jit(network_fn.apply)(variables, (images - info.mean) / info.std)
    np.testing.assert_allclose(exported.call(images), features, rtol=1e-5, atol=1e-6)
    with pytest.raises(UserError, match=r"has no classifier; its artifact returns features"):
        export.export(network, export.Options(probabilities=True))
