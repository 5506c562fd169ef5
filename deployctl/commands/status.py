"""`deployctl status`."""

from deployctl.errors import NotImplementedYet


def run(args, ui) -> int:
    raise NotImplementedYet("deployctl status: not implemented yet")
