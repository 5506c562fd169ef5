"""`deployctl plan`."""

from deployctl.errors import NotImplementedYet


def run(args, ui) -> int:
    raise NotImplementedYet("deployctl plan: not implemented yet")
