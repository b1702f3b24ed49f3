"""The config reference, `docs/config.md`, generated from the schema in `nets_training.config`.

    python -m nets_training.config_reference > docs/config.md

A key's meaning is the comment beside its field, or the comment lines just above it, so the
reference cannot drift from the code: a test checks that `docs/config.md` is current.
"""

import dataclasses
import inspect
import json
import re

from nets_training import config

HEADER = """\
# Config reference

Every key of the YAML experiment configs, with its default. Generated from
`nets_training/config.py` by `python -m nets_training.config_reference > docs/config.md`; a test
keeps it current. A config file is a diff on these defaults, and `train.py --set
section.key=value` overrides one key (the value is read as YAML: `--set optim.lr=5e-4`, `--set
data.mean=[0.5,0.5,0.5]`; a mapping merges into the section: `--set 'optim={lr: 0.05}'` keeps the
other optim keys, and `{}` empties it: `--set model.kwargs={}`). Unknown keys, keys written twice,
wrong types and invalid values stop the run with the key's dotted path and what would be valid. A
`null` default is filled by the run from the dataset or the network
([guide](guide.md#what-follows-the-dataset-and-the-network)), and the run's `config.yaml` says the
value used.
"""


def field_comments(cls: type) -> dict[str, str]:
    """Maps each field of dataclass `cls` to the comments beside and just above it."""
    names = {f.name for f in dataclasses.fields(cls)}
    comments, above = {}, []
    for line in inspect.getsource(cls).splitlines():
        text = line.strip()
        if text.startswith("#"):
            above.append(text.lstrip("#").strip())
            continue
        match = re.match(r"(\w+):[^#]*(?:#\s*(.*))?$", text)
        if match and match.group(1) in names:
            comments[match.group(1)] = " ".join([*above, match.group(2) or ""]).strip()
        above = []
    return comments


def _default(field: dataclasses.Field) -> str:
    value = (
        field.default if field.default_factory is dataclasses.MISSING else field.default_factory()
    )
    return json.dumps(
        list(value)
        if isinstance(value, tuple)
        else dict(value)
        if isinstance(value, dict)
        else value
    )


def render() -> str:
    """The whole reference as Markdown."""
    lines = [HEADER]
    for section in dataclasses.fields(config.Config):
        cls = section.default_factory
        lines += [f"## `{section.name}`", "", inspect.getdoc(cls), ""]
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        comments = field_comments(cls)
        for field in dataclasses.fields(cls):
            kind = str(field.type).replace("|", "\\|")
            lines.append(
                f"| `{section.name}.{field.name}` | `{kind}` | `{_default(field)}` "
                f"| {comments.get(field.name, '')} |"
            )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
