"""The ranktable JSON Schema as a structural net behind the plain-Python rules.

The schema ships as deployctl/data/ranktable.schema.json (ranktables/schema.json is the readable source; a
test keeps them identical). jsonschema costs about 55 us per device, 0.9 s for a 16000-device file, so it
judges a sample: every list cut to its first SAMPLE items (indexes, hence JSON paths, unchanged). The rules
judge every entry; the net catches a structure they do not know.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from deployctl.ranktable.rules import Violation

SAMPLE = 3  # covers the three P/D groups, and more than one server and device of each
_DEF_OF_KIND = {
    "pd-global": "pd_global",
    "pd-global-partial": "pd_global",
    "pd-local": "pd_local",
    "hccl-v1.0": "hccl_v1_0",
    "hccl-v1.2": "hccl_v1_2",
}
_VALID_SHAPES: set = set()  # (kind, shape) of samples the schema accepted


def schema_document() -> dict[str, Any]:
    """The schema as shipped inside the package (found when installed, not only from a clone)."""
    return json.loads(resources.files("deployctl").joinpath("data/ranktable.schema.json").read_text("utf-8"))


@functools.lru_cache(maxsize=None)
def _validator(definition: str):
    from jsonschema import Draft202012Validator

    schema = schema_document()
    return Draft202012Validator({"$schema": schema["$schema"], "$defs": schema["$defs"],
                                 "$ref": f"#/$defs/{definition}"})


def sample(value: Any) -> tuple[Any, Any]:
    """(shape, sample): the value with every list cut to its first SAMPLE items, and its keys and types."""
    if isinstance(value, dict):
        shapes, copy = [], {}
        for key, item in value.items():
            shape, copy[key] = (type(item).__name__, item) if type(item) is str else sample(item)
            shapes.append((key, shape))
        return tuple(shapes), copy
    if isinstance(value, list):
        pairs = [sample(item) for item in value[:SAMPLE]]
        return ("[]", *(shape for shape, _ in pairs)), [copy for _, copy in pairs]
    return type(value).__name__, value


def schema_violations(document: Any, kind: str) -> list[Violation]:
    """The schema's complaints about a sample of a document that passed the rules, as `schema` violations.

    A sample whose shape was accepted before is accepted again without jsonschema: the rules already
    checked every value, so only the shape can differ (1000 per-host files share a handful of shapes).
    """
    shape, copy = sample(document)
    if (kind, shape) in _VALID_SHAPES:
        return []
    errors = sorted(_validator(_DEF_OF_KIND[kind]).iter_errors(copy), key=lambda e: list(map(str, e.absolute_path)))
    if not errors:
        _VALID_SHAPES.add((kind, shape))
    return [Violation(tuple(e.absolute_path), "schema", e.message) for e in errors]
