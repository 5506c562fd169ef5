"""What a host holds for `image build`: the image's ID, size and inputs label, the base image's ID, the driver."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from deployctl.errors import FactParseError
from deployctl.facts.files import VERSION_INFO, parse_version_info
from deployctl.facts.probe import Probe

LABEL_INPUTS = "deployctl.inputs"
_SECTIONS = ("image", "base", "board", "version", "end")
# Constant; the image, the base image and the platform reach it as arguments.
IMAGE_SCRIPT = (
    'echo "@@image"; docker image inspect --format "{{.Id}} {{.Size}} {{json .Config.Labels}}" "$1" 2>/dev/null; '
    'echo "@@base"; docker image inspect --format "{{.Id}}" "$2" 2>/dev/null; '
    'if [ "$3" = ascend ]; then echo "@@board"; npu-smi info -t board -i 0 2>/dev/null; '
    f'echo "@@version"; cat {VERSION_INFO} 2>/dev/null; fi; echo "@@end"'
)


@dataclass(frozen=True)
class HostImage:
    """What a host has: the image's ID, size and `deployctl.inputs` label, the base image's ID, the NPU driver."""

    image_id: Optional[str] = None
    inputs: Optional[str] = None
    base_id: Optional[str] = None
    driver: Optional[str] = None
    size: Optional[int] = None  # bytes of the image (what a ship moves)


def image_probe(image: str, base: str, platform: str) -> Probe:
    return Probe(("sh", "-c", IMAGE_SCRIPT, "sh", image, base, platform), parse_image_state, "image",
                 tool_name="docker")


def parse_image_state(text: str) -> HostImage:
    """The probe's sections -> HostImage; a cut-off answer (no end marker) is a FactParseError."""
    sections: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@@") and line[2:] in _SECTIONS:
            current = line[2:]
            sections[current] = ""
        elif current:
            sections[current] += line + "\n"
    if "end" not in sections:
        raise FactParseError("docker image inspect", len(text.splitlines()), text.splitlines()[-1] if text.strip() else "",
                             "the probe's @@end marker")
    image_id, size, labels = None, None, {}
    image_line = sections.get("image", "").strip()
    if image_line:
        image_id, _, rest = image_line.partition(" ")
        size_text, _, label_text = rest.partition(" ")
        size = int(size_text) if size_text.isdigit() else None
        labels = _labels(label_text)
    return HostImage(image_id=image_id or None, inputs=labels.get(LABEL_INPUTS), size=size,
                     base_id=sections.get("base", "").strip() or None,
                     driver=_driver(sections.get("board", ""), sections.get("version", "")))


def _labels(text: str) -> dict:
    """The image's labels: a JSON object of strings (Docker's `map[string]string`). A damaged answer (cut, not an
    object, a value not a string) reads as no labels: the image is rebuilt as one deployctl did not build."""
    try:
        labels = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(labels, dict):
        return {}
    return {key: value for key, value in labels.items() if isinstance(value, str)}


def _driver(board: str, version: str) -> Optional[str]:
    from deployctl.facts.npu_smi import parse_npu_smi_board  # only where a board answered: the rest skip it

    for text, parse in ((board, lambda t: parse_npu_smi_board(t).software_version),
                        (version, lambda t: parse_version_info(t).version)):
        if text.strip():
            try:
                return parse(text)
            except (FactParseError, ValueError, IndexError):  # a host without the tool answers nothing useful; the other source may
                continue
    return None
