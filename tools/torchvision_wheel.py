"""torchvision's pure-Python modules from its wheel, for the reference scripts that need them
(tools/fixtures_augment.py, bench/timm_input_pipeline.py) on machines where torchvision does not
install beside CPU torch: its only wheel here is a CUDA build whose compiled operators do not
load. Its `__init__` (which loads them) is skipped; `torchvision.transforms` and what timm's data
pipeline imports from it are plain Python and work.

    pip download --no-deps torchvision==0.29.1 -d /tmp/tv
"""

import sys
import tempfile
import types
import zipfile
from pathlib import Path


def import_torchvision(wheel: str) -> None:
    """Registers the wheel's `torchvision` package (unpacked to a temporary folder)."""
    root = Path(tempfile.mkdtemp())
    zipfile.ZipFile(wheel).extractall(root)
    package = types.ModuleType("torchvision")
    package.__path__ = [str(root / "torchvision")]
    sys.modules["torchvision"] = package
