"""`deployctl ranktable gen|merge|validate`."""

from deployctl.errors import NotImplementedYet


def gen(args, ui) -> int:
    raise NotImplementedYet("deployctl ranktable gen: not implemented yet")


def merge(args, ui) -> int:
    raise NotImplementedYet("deployctl ranktable merge: not implemented yet")


def validate(args, ui) -> int:
    raise NotImplementedYet("deployctl ranktable validate: not implemented yet")
