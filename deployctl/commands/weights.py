"""`deployctl weights sync`."""

from deployctl.errors import NotImplementedYet


def sync(args, ui) -> int:
    raise NotImplementedYet("deployctl weights sync: not implemented yet")
