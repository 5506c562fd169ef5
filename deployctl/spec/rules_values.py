"""Rules on single values that end up in a Docker command: the weights' directory in `--volume`. Every image
reference is checked by the schema (`format: image-reference`, schema.py's FORMATS), at its own path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from deployctl.errors import Problem
from deployctl.spec.show import quoted

if TYPE_CHECKING:
    from deployctl.spec.rules import Context

def check_weights_dest(c: Context) -> Iterator[Problem]:
    """No ':' in weights.dest: `docker run --volume SOURCE:TARGET:ro` splits there, so `/data/a:b` would mount
    `/data/a` at `b` with the option `b:ro`, or fail."""
    dest = c.value(("weights", "dest"), str)
    if dest is not None and ":" in dest:
        yield Problem(("weights", "dest"), f"{quoted(dest)} contains ':', which `docker run --volume "
                                           "SOURCE:TARGET:ro` reads as a separator",
                      hint="choose a directory whose path has no ':'")
