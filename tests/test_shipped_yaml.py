"""The files rlsim ships are parsed with libyaml where it exists: the values must be SafeLoader's."""

from importlib import resources
from pathlib import Path

import pytest
import yaml

from rlsim.inputs import load_shipped_yaml

SHIPPED = sorted(Path(str(resources.files("rlsim"))).rglob("*.yaml"))


def test_every_package_data_yaml_is_found():
    names = {p.name for p in SHIPPED}
    assert {"gpus.yaml", "llms.yaml", "prices.yaml", "libraries.yaml", "engines.yaml", "default.yaml"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_shipped_file_parses_as_safe_loader_does(path):
    text = path.read_text(encoding="utf-8")
    assert load_shipped_yaml(text) == yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506


def test_a_value_safe_loader_types_is_typed_the_same():
    text = "a: 1e3\nb: 0x1F\nc: 2024-01-02\nd: ~\ne: .5\nf: 'yes'\ng: yes\nh: 1_000\n"
    assert load_shipped_yaml(text) == yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506
