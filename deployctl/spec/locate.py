"""YAML text -> plain data plus the source position of every value and key, so errors name a line.

Built on `yaml.compose` (every node keeps a start mark); the node tree is turned into dicts/lists here,
which is where duplicate keys are caught and `${VAR}` references are resolved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from deployctl.errors import Problem

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
    """Parse YAML text; raise SyntaxProblem on a YAML syntax error (pointing at its line)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's composer when present: ~10x faster
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        message = error.problem or str(error)
        if error.context and error.context not in message:
            message = f"{error.context}: {message}"
        source_line = text.splitlines()[line - 1] if 0 < line <= len(text.splitlines()) else ""
        # `{address: ${HOST}}`: inside { } or [ ] a plain value cannot hold braces, so ${VAR} needs quotes.
        hint = 'quote a value that holds ${VAR} inside { } or [ ]: "${VAR}"' if "${" in source_line else None
        raise SyntaxProblem(Problem((), f"YAML syntax error: {message}", hint=hint, file=filename, line=line,
                                    column=column))
    except yaml.YAMLError as error:  # e.g. a reader error (bad bytes): no mark to show
        raise SyntaxProblem(Problem((), f"YAML error: {error}", file=filename, line=1, column=1))
    document = Document(data=None)
    if root is None:
        document.problems.append(Problem((), "the spec is empty", file=filename, line=1, column=1))
        return document
    builder = _Builder(document, environ, filename, yaml.constructor.SafeConstructor())
    document.data = builder.build(root, ())
    return document


class SyntaxProblem(Exception):
    """The YAML could not be parsed at all; carries the one Problem to report."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class _Builder:
    """Walks composed nodes into plain data, recording positions on the way."""

    def __init__(self, document: Document, environ: Mapping[str, str], filename: str, constructor) -> None:
        self.document, self.environ, self.filename, self.constructor = document, environ, filename, constructor

    def build(self, node, path: Path) -> Any:
        import yaml

        self.document.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (index,)) for index, item in enumerate(node.value)]
        value = self.constructor.construct_object(node, deep=True)
        if isinstance(value, str) and "$" in value and node.tag == "tag:yaml.org,2002:str":
            value = self._resolve(value, path)
        return value

    def _mapping(self, node, path: Path) -> dict:
        import yaml

        self.constructor.flatten_mapping(node)  # YAML merge keys (<<: *defaults) become plain pairs
        out: dict = {}
        for key_node, value_node in node.value:
            key = self.constructor.construct_object(key_node, deep=True) if isinstance(key_node, yaml.ScalarNode) else None
            where = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                self._problem(path, "a key must be a plain word", where)
                continue
            key = key if isinstance(key, str) else str(key).lower() if isinstance(key, bool) else str(key)
            if key in out:
                first = self.document.keys[path + (key,)][0]
                self._problem(path + (key,), f"duplicate key '{key}' (first defined on line {first})", where)
                continue
            self.document.keys[path + (key,)] = where
            out[key] = self.build(value_node, path + (key,))
        return out

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
