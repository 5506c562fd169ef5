"""`deployctl image build`."""

from deployctl.errors import NotImplementedYet


def build(args, ui) -> int:
    raise NotImplementedYet("deployctl image build: not implemented yet")
