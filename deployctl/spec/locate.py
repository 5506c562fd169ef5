"""YAML text -> plain data plus the source position of every value and key, so errors name a line.

Built on yaml12.compose (YAML 1.2 core scalars, bounded; every node keeps a start mark); the node tree is
turned into dicts/lists here, which is where merge keys are applied, duplicate keys caught, alias expansion
bounded and `${VAR}` references resolved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from deployctl.errors import Problem
from deployctl.spec import yaml12

Path = tuple  # (str | int, ...): a place in the document, e.g. ("topology", "prefill", 0, "devices", 1)

# ${NAME} is a reference; $${NAME} is the literal text ${NAME} (docker compose's escape).
_REFERENCE = re.compile(r"\$(\$?)\{([^}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class Document:
    """A parsed spec: its data, where each value and key sits, and the `${VAR}` texts it used."""

    data: Any
    values: dict = field(default_factory=dict)  # path -> (line, column) of the value, 1-based
    keys: dict = field(default_factory=dict)  # path -> (line, column) of the mapping key naming it
    references: dict = field(default_factory=dict)  # path -> original text of a string that held ${VAR}
    problems: list = field(default_factory=list)  # duplicate keys, unset variables
    unset: list = field(default_factory=list)  # the problems of unset variables (a loader may forgive some)

    def locate(self, path: Path, *, key: bool = False) -> tuple[int, int]:
        """Line/column of `path` (its key when `key`), else of its nearest ancestor that has one."""
        path = tuple(path)
        if key and path in self.keys:
            return self.keys[path]
        while path:
            if path in self.values:
                return self.values[path]
            path = path[:-1]
        return self.values.get((), (1, 1))


def compose_document(text: str, environ: Mapping[str, str], filename: str = "spec.yaml") -> Document:
    """Parse YAML text; raise SyntaxProblem on a YAML syntax error or refused input (pointing at its line)."""
    import yaml

    try:
        root = yaml12.compose(text)
        document = Document(data=None)
        if root is None:
            document.problems.append(Problem((), "the spec is empty", file=filename, line=1, column=1))
            return document
        document.data = _Builder(document, environ, filename).build(root, ())
        return document
    except yaml12.Refused as refused:
        raise SyntaxProblem(Problem((), refused.message, file=filename, line=refused.line, column=refused.column))
    except yaml.MarkedYAMLError as error:
        raise SyntaxProblem(_syntax_problem(error, text, filename))
    except yaml.YAMLError as error:  # no mark to show
        raise SyntaxProblem(Problem((), f"YAML error: {error}", file=filename, line=1, column=1))


def _syntax_problem(error, text: str, filename: str) -> Problem:
    mark = error.problem_mark or error.context_mark
    line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    lines = text.splitlines()
    source_line = lines[line - 1] if 0 < line <= len(lines) else ""
    if column <= len(source_line) and source_line[column - 1] == "\t" or "tab character" in (error.problem or ""):
        return Problem((), "a tab character: YAML indents with spaces only", file=filename, line=line, column=column)
    message = error.problem or str(error)
    if error.context and error.context not in message:
        message = f"{error.context}: {message}"
    # `{address: ${HOST}}`: inside { } or [ ] a plain value cannot hold braces, so ${VAR} needs quotes.
    hint = 'quote a value that holds ${VAR} inside { } or [ ]: "${VAR}"' if "${" in source_line else None
    return Problem((), f"YAML syntax error: {message}", hint=hint, file=filename, line=line, column=column)


class SyntaxProblem(Exception):
    """The YAML could not be parsed at all; carries the one Problem to report."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class _Builder:
    """Walks composed nodes into plain data, recording positions on the way.

    An alias makes one node reachable many times (a 350-byte "billion laughs" reaches 10^9 values), so every
    value built and every merged pair counts against yaml12.MAX_VALUES, and the path's length is the depth.
    """

    def __init__(self, document: Document, environ: Mapping[str, str], filename: str) -> None:
        self.document, self.environ, self.filename = document, environ, filename
        self.budget = yaml12.MAX_VALUES
        self.open: set = set()  # ids of the collections being built: an alias to one of them is a cycle

    def build(self, node, path: Path) -> Any:
        where = (node.start_mark.line + 1, node.start_mark.column + 1)
        self._spend(where)
        self.document.values[path] = where
        if node.tag not in yaml12.ALLOWED_TAGS:
            self._problem(path, f"the tag '{yaml12.short_tag(node.tag)}' is not allowed in a spec", where)
            return None
        if node.id == "scalar":
            try:
                value = yaml12.scalar_value(node)
            except yaml12.BadScalar as bad:
                self._problem(path, str(bad), where)
                return node.value
            if isinstance(value, str) and "$" in value and node.tag == "tag:yaml.org,2002:str":
                value = self._resolve(value, path)
            return value
        self._enter(node, path, where)
        try:
            if node.id == "mapping":
                return self._mapping(node, path)
            return [self.build(item, path + (index,)) for index, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def _mapping(self, node, path: Path) -> dict:
        chosen: dict = {}  # key -> (where, value node): merged keys first, later ones win, written keys last
        written: dict = {}  # key -> line of a key written in this mapping itself
        for key_node, value_node, merged in self._pairs(node, path):
            where = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            key = _key_text(key_node) if key_node.id == "scalar" else None
            if key is None:
                self._problem(path, "a key must be a plain word", where)
                continue
            if not merged and key in written:
                self._problem(path + (key,), f"duplicate key '{key}' (first defined on line {written[key]})", where)
                continue
            if not merged:
                written[key] = where[0]
            chosen[key] = (where, value_node)
        out: dict = {}
        for key, (where, value_node) in chosen.items():
            self.document.keys[path + (key,)] = where
            out[key] = self.build(value_node, path + (key,))
        return out

    def _pairs(self, node, path: Path) -> list:
        """(key node, value node, merged?) of a mapping, merge keys (`<<: *defaults`) expanded as YAML says."""
        merged, written = [], []
        for key_node, value_node in node.value:
            if key_node.tag != "tag:yaml.org,2002:merge":
                written.append((key_node, value_node, False))
                continue
            sources = value_node.value if value_node.id == "sequence" else [value_node]
            if not all(source.id == "mapping" for source in sources):
                where = (value_node.start_mark.line + 1, value_node.start_mark.column + 1)
                self._problem(path, "a merge key (<<) takes a mapping or a list of mappings", where)
                continue
            for source in reversed(sources):  # of a list, the first mapping that has a key wins
                where = (source.start_mark.line + 1, source.start_mark.column + 1)
                self._enter(source, path, where)
                try:
                    pairs = self._pairs(source, path)
                finally:
                    self.open.discard(id(source))
                for pair in pairs:
                    self._spend(where)
                    merged.append((pair[0], pair[1], True))
        return merged + written

    def _enter(self, node, path: Path, where: tuple[int, int]) -> None:
        if id(node) in self.open:
            raise yaml12.Refused("an alias refers to a value that contains it (the spec would be infinite)", *where)
        if len(path) >= yaml12.MAX_DEPTH:
            raise yaml12.Refused(f"the spec nests deeper than {yaml12.MAX_DEPTH} levels", *where)
        self.open.add(id(node))

    def _spend(self, where: tuple[int, int]) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise yaml12.Refused(f"the spec expands to more than {yaml12.MAX_VALUES} values (YAML aliases?)", *where)

    def _resolve(self, text: str, path: Path) -> str:
        def substitute(match: re.Match) -> str:
            escaped, name = match.group(1), match.group(2)
            if escaped:
                return "${" + name + "}"
            if not _NAME.match(name):
                self._problem(path, f"'${{{name}}}' is not a valid variable reference", self.document.values[path])
                return match.group(0)
            if name not in self.environ:
                self._problem(path, f"environment variable {name} is not set", self.document.values[path],
                              hint=f"export {name}=... before running deployctl")
                self.document.unset.append(self.document.problems[-1])
                return ""
            return self.environ[name]

        resolved = _REFERENCE.sub(substitute, text)
        if any(not m.group(1) for m in _REFERENCE.finditer(text)):
            self.document.references[path] = text
        return resolved

    def _problem(self, path: Path, message: str, where: tuple[int, int], hint: str | None = None) -> None:
        self.document.problems.append(
            Problem(tuple(path), message, hint=hint, file=self.filename, line=where[0], column=where[1])
        )


def _key_text(node) -> str | None:
    """A mapping key as the text written (`010:` stays "010", `True:` "True"); null is no key."""
    return None if node.tag == "tag:yaml.org,2002:null" else node.value
