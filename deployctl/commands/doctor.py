"""`deployctl doctor`."""

from deployctl.errors import NotImplementedYet


def run(args, ui) -> int:
    raise NotImplementedYet("deployctl doctor: not implemented yet")
