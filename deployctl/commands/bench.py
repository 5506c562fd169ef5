"""`deployctl bench static|dynamic`."""

from deployctl.errors import NotImplementedYet


def run(args, ui) -> int:
    raise NotImplementedYet("deployctl bench: not implemented yet")
