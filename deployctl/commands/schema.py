"""`deployctl schema`: print the spec's JSON Schema (for editors: yaml-language-server)."""

from __future__ import annotations

import sys


def run(args, ui) -> int:
    from deployctl.spec.schema import schema_text

    sys.stdout.write(schema_text())
    return 0
