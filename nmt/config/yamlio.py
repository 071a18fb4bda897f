"""YAML as configs read it: PyYAML's safe loader, with one-line errors naming the text's origin."""

from __future__ import annotations

import re
from typing import Any

import yaml

from nmt.errors import NmtError


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader without YAML 1.1's base-60 numbers (YAML 1.2 has none either), so
    `max_time: 1:30` stays the text it looks like, refused as a duration, not 90 seconds."""


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
# SafeLoader's resolvers, its number patterns refusing any text with a ':' (the base-60 forms)
_YamlLoader.yaml_implicit_resolvers = {
    first: [
        (tag, re.compile("(?!.*:)" + rx.pattern, rx.flags) if tag in _NUMBER_TAGS else rx)
        for tag, rx in resolvers
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_yaml(text: str) -> Any:
    """YAML as configs read it: safe, and `1:30` is text (_YamlLoader)."""
    return yaml.load(text, Loader=_YamlLoader)


def read_yaml(text: str, origin: str) -> dict[str, Any]:
    """The parsed config text ({} when empty); broken YAML is one line naming `origin`."""
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        raise NmtError(f"{origin}: invalid YAML ({str(e).splitlines()[0]})") from None
    return data or {}
