"""Rules on single values that end up in a Docker command: the weights' directory in `--volume`, and every image
reference (image.name, image.build.base), each refused at its own path before a host sees it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from deployctl.errors import Problem
from deployctl.spec.image_reference import image_reference_problem
from deployctl.spec.show import quoted

if TYPE_CHECKING:
    from deployctl.spec.rules import Context

IMAGE_PATHS = (("image", "name"), ("image", "build", "base"))


def check_weights_dest(c: Context) -> Iterator[Problem]:
    """No ':' in weights.dest: `docker run --volume SOURCE:TARGET:ro` splits there, so `/data/a:b` would mount
    `/data/a` at `b` with the option `b:ro`, or fail."""
    dest = c.value(("weights", "dest"), str)
    if dest is not None and ":" in dest:
        yield Problem(("weights", "dest"), f"{quoted(dest)} contains ':', which `docker run --volume "
                                           "SOURCE:TARGET:ro` reads as a separator",
                      hint="choose a directory whose path has no ':'")


def check_image_references(c: Context) -> Iterator[Problem]:
    """Each image the spec names follows Docker's reference grammar (no newline, space or upper-case path)."""
    for path in IMAGE_PATHS:
        value = c.value(path, str)
        if value is None:
            continue
        broken = image_reference_problem(value)
        if broken:
            yield Problem(path, f"{quoted(value)}: {broken}", hint="e.g. registry.example:5000/team/vllm-ascend:6.3.909")
