"""`deployctl up`."""

from deployctl.errors import NotImplementedYet


def run(args, ui) -> int:
    raise NotImplementedYet("deployctl up: not implemented yet")
