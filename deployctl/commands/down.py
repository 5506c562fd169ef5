"""`deployctl down`."""

from deployctl.errors import NotImplementedYet


def run(args, ui) -> int:
    raise NotImplementedYet("deployctl down: not implemented yet")
