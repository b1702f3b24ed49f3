"""The user guide's generated parts are current, and every config key is explained."""

import dataclasses
from pathlib import Path

from nets_training import config, config_reference

ROOT = Path(__file__).resolve().parent.parent


def test_config_reference_is_current():
    expected = config_reference.render()
    assert (ROOT / "docs" / "config.md").read_text() == expected, (
        "docs/config.md is stale: run `python -m nets_training.config_reference > docs/config.md`"
    )


def test_every_config_key_has_a_meaning():
    for section in dataclasses.fields(config.Config):
        cls = section.default_factory
        comments = config_reference.field_comments(cls)
        for field in dataclasses.fields(cls):
            assert comments.get(field.name), f"{section.name}.{field.name} has no comment"


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text()
    for target in ("docs/guide.md", "docs/networks.md", "docs/config.md"):
        assert f"]({target})" in readme and (ROOT / target).is_file(), target


def test_readme_counts_the_registry():
    import nets_factory

    readme = (ROOT / "README.md").read_text()
    assert f"{len(nets_factory.networks_map)} image-classification networks" in readme
