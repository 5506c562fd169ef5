"""YAML for specs: plain scalars by the YAML 1.2 core schema, standard tags only, bounded depth and size.

PyYAML alone is YAML 1.1 (`yes` is true, `010` is 8, `134:20` is 8060) and composes without limits (a
350-byte alias bomb or `[[[[...` 100k deep exhausts memory or crashes libyaml's recursive composer). Here
libyaml only parses (its parser keeps an explicit stack); composing is PyYAML's Python composer, bounded.
"""

from __future__ import annotations

import re

MAX_BYTES = 4 * 1024 * 1024  # specs are a few KiB; a 1000-host spec is well under 1 MiB
MAX_DEPTH = 64  # a spec nests about 6 deep; jsonschema and the builder recurse per level
MAX_VALUES = 50_000  # values after alias and merge expansion: ~3000 hosts' worth; composing 50k takes ~0.25 s

_CORE = "tag:yaml.org,2002:"
# What the builder accepts; `!!python/object:...`, `!foo` and the like are refused where they are written.
ALLOWED_TAGS = tuple(_CORE + name for name in ("str", "int", "float", "bool", "null", "seq", "map", "merge"))

_NULL = re.compile(r"(?:null|Null|NULL|~|)\Z")
_BOOL = re.compile(r"(?:true|True|TRUE|false|False|FALSE)\Z")
_INT = re.compile(r"(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z")
_FLOAT = re.compile(r"(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z")
_MERGE = re.compile(r"<<\Z")
# What YAML calls printable (YAML 1.2 §5.1); anything else in a spec is a binary file or a paste accident.
# Written as the complement: a class of all printable ranges takes milliseconds to compile.
_NOT_PRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufffe\uffff]")


class Refused(Exception):
    """Input that is not parsed any further: too big, too deep, too many values, a binary byte."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


class BadScalar(ValueError):
    """A scalar whose tag does not fit its text (`!!int abc`), or an ambiguous one (`010`)."""


def short_tag(tag: str) -> str:
    return "!!" + tag[len(_CORE):] if tag.startswith(_CORE) else tag


def check_text(text: str) -> None:
    """Refuse text too long to be a spec, or holding a character YAML does not allow."""
    if len(text) > MAX_BYTES:
        raise Refused(f"the spec is larger than {MAX_BYTES // (1024 * 1024)} MiB; a spec is a few KiB of YAML")
    bad = _NOT_PRINTABLE.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        what = "a NUL byte: this is not a text file" if bad.group() == "\0" else \
            f"the control character U+{ord(bad.group()):04X} is not allowed in YAML"
        raise Refused(what, line, column)


def compose(text: str):
    """The root node of the single document in `text` (None when empty); raises yaml.YAMLError or Refused."""
    check_text(text)
    fast, pure = _loader_classes()
    import yaml  # already imported by _loader_classes

    try:
        return _compose_with(fast, text)
    except yaml.YAMLError as error:
        if fast is pure:
            raise
        # libyaml's scanner reads ahead of the composer and has limits of its own (0.2.6+: flow nesting past
        # 1000 levels), so its message would stand where deployctl's own limits should answer first. The
        # pure-Python parser has none of them: run it to let deployctl's bounded composer speak, and keep
        # libyaml's error when deployctl has nothing to refuse.
        try:
            _compose_with(pure, text)
        except yaml.YAMLError:
            pass
        raise error


def _compose_with(loader_class, text: str):
    loader = loader_class(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def scalar_value(node):
    """The Python value of a scalar node by its (resolved or explicit) tag, YAML 1.2 core."""
    tag, text = node.tag, node.value
    if tag == _CORE + "null" and _NULL.match(text):
        return None
    if tag == _CORE + "bool" and _BOOL.match(text):
        return text.lower() == "true"
    if tag == _CORE + "int" and _INT.match(text):
        return _integer(text)
    if tag == _CORE + "float" and _FLOAT.match(text):
        lowered = text.lower()
        return float(lowered.replace(".", "", 1) if lowered.endswith((".inf", ".nan")) else text)
    if tag in (_CORE + "str", _CORE + "merge"):
        return text
    raise BadScalar(f"'{text}' is not a valid {short_tag(tag)}")


def _integer(text: str) -> int:
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    digits = text.lstrip("+-")
    if len(digits) > 1 and digits.startswith("0"):
        # YAML 1.2 reads 010 as ten, YAML 1.1 (PyYAML, many editors) as eight: refuse rather than guess.
        sign = "-" if text.startswith("-") else ""
        decimal = int(text, 10)
        if set(digits) <= set("01234567") and int(digits, 8) != int(digits, 10):
            raise BadScalar(f"{text} is ambiguous: write {decimal} or {sign}{int(digits, 8)}")
        raise BadScalar(f"{text} has a leading zero: write {decimal}")
    return int(text, 10)


_LOADERS = None


def _loader_classes():
    """(libyaml's loader, or the pure one without libyaml; the pure-Python loader), both bounded.

    Built on first use so that importing this module does not import yaml (CLI start-up)."""
    global _LOADERS
    if _LOADERS is not None:
        return _LOADERS
    from yaml.composer import Composer
    from yaml.events import AliasEvent
    from yaml.resolver import BaseResolver

    class CoreResolver(BaseResolver):
        yaml_implicit_resolvers: dict = {}

    for tag, pattern, first in (
        ("null", _NULL, ["n", "N", "~", ""]),
        ("bool", _BOOL, list("tTfF")),
        ("int", _INT, list("-+0123456789")),
        ("float", _FLOAT, list("-+.0123456789")),
        ("merge", _MERGE, ["<"]),
    ):
        CoreResolver.add_implicit_resolver(_CORE + tag, pattern, first)

    class BoundedComposer(Composer):
        """Counts nodes and depth as it composes: refused input ends at the first node past a limit."""

        def __init__(self) -> None:
            Composer.__init__(self)
            self.depth, self.count = 0, 0

        def compose_node(self, parent, index):
            if self.check_event(AliasEvent):
                return Composer.compose_node(self, parent, index)
            event = self.peek_event()
            mark = event.start_mark
            # YAML lets an anchor be defined again: later aliases mean the latest one (PyYAML refuses it).
            self.anchors.pop(event.anchor, None)
            self.depth, self.count = self.depth + 1, self.count + 1
            if self.depth > MAX_DEPTH:
                raise Refused(f"the spec nests deeper than {MAX_DEPTH} levels", mark.line + 1, mark.column + 1)
            if self.count > MAX_VALUES:
                raise Refused(f"the spec has more than {MAX_VALUES} values", mark.line + 1, mark.column + 1)
            try:
                return Composer.compose_node(self, parent, index)
            finally:
                self.depth -= 1

        def compose_scalar_node(self, anchor):
            event = self.peek_event()
            if event.tag == "!":  # YAML: the non-specific tag makes a scalar a string; libyaml reads it as plain
                event.implicit = (False, True)
            return Composer.compose_scalar_node(self, anchor)

    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class PureLoader(Reader, Scanner, Parser, BoundedComposer, CoreResolver):
        def __init__(self, stream) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            BoundedComposer.__init__(self)
            CoreResolver.__init__(self)

    try:
        from yaml.cyaml import CParser as parser
    except ImportError:  # PyYAML built without libyaml
        _LOADERS = (PureLoader, PureLoader)
        return _LOADERS

    class FastLoader(BoundedComposer, parser, CoreResolver):  # the composer first: CParser has its own
        def __init__(self, stream) -> None:
            parser.__init__(self, stream)
            BoundedComposer.__init__(self)
            CoreResolver.__init__(self)

    _LOADERS = (FastLoader, PureLoader)
    return _LOADERS
