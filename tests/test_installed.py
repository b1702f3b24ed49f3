"""The package as a user gets it: built into a wheel, installed into a fresh environment, and used
from a folder that is not the checkout (pytest's `pythonpath = ["."]` hides what a wheel leaves
out). Offline: the wheel is built without build isolation, installed without dependencies into a
venv that sees this environment's packages (a `.pth` line, so their own `.pth` files, such as the
checkout's editable install, stay out)."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import TINY_NETWORK

pytestmark = pytest.mark.slow  # builds a wheel and a venv, runs the programs

ROOT = Path(__file__).resolve().parents[1]
# What the wheel is built from: everything but what only the checkout needs.
NOT_SHIPPED = ("tests", "tools", "bench", "docs", "examples", "runs", "build", ".*", "*.egg-info")


def first_party_modules() -> list[str]:
    """Every module of the checkout's packages and top-level `nets_*` modules: all must ship."""
    modules = [p.stem for p in ROOT.glob("nets_*.py")]
    for package in [p for p in ROOT.glob("nets*") if (p / "__init__.py").is_file()]:
        for path in package.rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(modules)


def run(*args, cwd, status=0, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300, **kwargs
    )
    assert result.returncode == status, f"{args}: {result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv with the built wheel installed; returns its `bin` folder."""
    tmp = tmp_path_factory.mktemp("installed")
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_SHIPPED, "__pycache__"))
    flags = ("--no-deps", "--no-index", "--no-build-isolation", "--quiet")
    run(sys.executable, "-m", "pip", "wheel", *flags, "--wheel-dir", tmp / "dist", source, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("*.whl")
    run(sys.executable, "-m", "venv", "--without-pip", tmp / "venv", cwd=tmp)
    python = tmp / "venv" / "bin" / "python"
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp)
    ours = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    (Path(site.stdout.strip()) / "test_environment.pth").write_text("\n".join(ours) + "\n")
    install = ("install", "--no-deps", "--no-index", "--ignore-installed", "--quiet", wheel)
    run(python, "-m", "pip", *install, cwd=tmp)
    return tmp / "venv" / "bin"


def test_the_wheel_ships_every_module_and_only_named_top_levels(installed, tmp_path):
    # Each module is found; all but the programs (whose absl flags are one per process: the
    # console scripts below run them) are imported.
    code = (
        "import importlib, importlib.util, sys\n"
        "for m in sys.argv[1:]:\n"
        "    assert importlib.util.find_spec(m), m\n"
        "    if not m.startswith('nets_cli.'): importlib.import_module(m)\n"
        "from nets_weights import catalogue, architectures\n"  # their package data
        "assert catalogue.architecture_of('resnet50.a1_in1k') == 'resnet50'\n"
        "assert len(architectures.imagenet_class_names()) == 1000\n"
    )
    # The wheel, and this environment's install (`pip install -e .`, as the README says).
    for python in (installed / "python", sys.executable):
        run(python, "-c", code, *first_party_modules(), cwd=tmp_path)
    site = run(
        installed / "python",
        "-c",
        "import nets_factory, pathlib; print(pathlib.Path(nets_factory.__file__).parent)",
        cwd=tmp_path,
    ).stdout.strip()
    assert Path(site) != ROOT and str(ROOT) not in site
    record = next(Path(site).glob("jax_nets_factory-*.dist-info")) / "top_level.txt"
    top_level = set(record.read_text().split())
    assert top_level == {
        "nets",
        "nets_cli",
        "nets_factory",
        "nets_inference",
        "nets_nnx",
        "nets_summary",
        "nets_training",
        "nets_weights",
    }


def test_installed_programs_work_from_any_folder(installed, tmp_path):
    listing = run(installed / "python", "-m", "nets_factory", cwd=tmp_path).stdout
    assert "resnet50" in listing and "25,557,032" in listing
    help_text = run(installed / "nets-train", "--help", cwd=tmp_path, status=1).stdout  # absl's
    assert "--config" in help_text and "nets-train --config=" in help_text
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    trained = run(
        installed / "nets-train",
        "--workdir=run",
        "--compilation_cache=",
        "--config=default.yaml",  # a shipped config, by name
        f"--set={TINY_NETWORK}",
        "--set=train.steps=2",
        "--set=train.checkpoint_every=1",
        cwd=tmp_path,
        env=env,
    )
    assert "step 2" in trained.stdout + trained.stderr
    assert (tmp_path / "run" / "config.yaml").is_file()
    averaged = run(installed / "nets-average", "--workdir=run", "--last=2", cwd=tmp_path, env=env)
    first, second = averaged.stdout.splitlines()
    assert first == "averaged steps 2, 1, the run's 2 newest checkpoints: run/averaged/2"
    assert second.startswith("step 2 (averaged): eval loss ") and averaged.stderr == ""
    exported = run(
        installed / "nets-export", "--workdir=run", "--out=tiny.jaxexport", cwd=tmp_path, env=env
    )
    assert exported.stdout.startswith("wrote tiny.jaxexport") and exported.stderr == ""
    assert (tmp_path / "tiny.jaxexport").stat().st_mode & 0o777 == 0o666 & ~current_umask()


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
