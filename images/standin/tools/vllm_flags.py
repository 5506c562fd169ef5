"""Derive `vllm serve`'s option strings from a vLLM wheel's source, without installing vLLM (it needs torch).

    python images/standin/tools/vllm_flags.py VERSION=WHEEL_OR_SOURCE_DIR ... > images/standin/standin/data/vllm_flags.json

Reads what vLLM's own parser is built from, statically: `make_arg_parser` (the serve options), the frontend
dataclass whose fields become `--field-name` flags, and `EngineArgs.add_cli_args` with the config dataclasses behind
each `**X_kwargs["field"]`. Each option gets a kind, as vLLM's `_compute_kwargs` (vllm/engine/arg_utils.py) turns a
field's type into argparse keywords: a bool becomes `argparse.BooleanOptionalAction` (`--x` and `--no-x`; from
the version with `EnableDisableAction` in vllm/utils/argparse_utils.py also `--enable-x`/`--disable-x` pairs),
`bool | str | None` an optional value (nargs "?"), a list/tuple/set several values (nargs "+"), anything else one
value. The output is the stand-in's data file: {vllm version: {kind: [options]}}; the stand-in refuses any other
option as argparse does. Development tool only: the image does not contain it (re-run it for a new version).
"""

from __future__ import annotations

import ast
import io
import json
import sys
import zipfile
from pathlib import Path

FLAG, VALUE, OPTIONAL, LIST = "flag", "value", "optional", "list"
_STORE_FLAG = {"store_true", "store_false", "store_const", "count", "help", "version"}


class Source:
    """The .py files of one vLLM tree, from a wheel or a directory."""

    def __init__(self, where: str) -> None:
        self.files: dict[str, str] = {}
        path = Path(where)
        if path.is_dir():
            for file in path.rglob("vllm/**/*.py"):
                self.files[str(file.relative_to(path))] = file.read_text(encoding="utf-8")
        else:
            with zipfile.ZipFile(path) as wheel:
                for name in wheel.namelist():
                    if name.startswith("vllm/") and name.endswith(".py"):
                        self.files[name] = io.TextIOWrapper(wheel.open(name), encoding="utf-8").read()

    def tree(self, name: str) -> ast.Module:
        return ast.parse(self.files[name], name)

    def find(self, needle: str, under: str = "vllm/") -> list[str]:
        return sorted(n for n, text in self.files.items() if n.startswith(under) and needle in text)


class Types:
    """Classes (with their annotated fields and bases) and module-level type aliases of the config packages."""

    def __init__(self, source: Source) -> None:
        self.fields: dict[str, dict[str, ast.expr]] = {}
        self.bases: dict[str, list[str]] = {}
        self.aliases: dict[str, ast.expr] = {}
        for name in source.files:
            if not name.startswith(("vllm/config", "vllm/engine/", "vllm/entrypoints/", "vllm/v1/", "vllm/lora/",
                                    "vllm/multimodal/", "vllm/model_executor/layers/quantization/__init__")):
                continue
            try:
                tree = source.tree(name)
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    self._class(node)
                elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    self.aliases.setdefault(node.targets[0].id, node.value)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None \
                        and "TypeAlias" in ast.unparse(node.annotation):
                    self.aliases.setdefault(node.target.id, node.value)
                elif type(node).__name__ == "TypeAlias":  # `type X = ...` (Python 3.12 syntax)
                    self.aliases.setdefault(node.name.id, node.value)

    def _class(self, node: ast.ClassDef) -> None:
        fields = {}
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) \
                    and "ClassVar" not in ast.unparse(item.annotation):
                fields[item.target.id] = item.annotation
        if node.name not in self.fields or len(fields) > len(self.fields[node.name]):
            self.fields[node.name] = fields
            self.bases[node.name] = [ast.unparse(b).split(".")[-1] for b in node.bases]

    def field(self, cls: str, name: str):
        """A field's annotation, looked up through the base classes."""
        seen = set()
        todo = [cls]
        while todo:
            current = todo.pop(0)
            if current in seen:
                continue
            seen.add(current)
            if name in self.fields.get(current, {}):
                return self.fields[current][name]
            todo += self.bases.get(current, [])
        return None

    def all_fields(self, cls: str) -> list[str]:
        """Field names in definition order, the bases' first (as dataclasses.fields orders them)."""
        out: list[str] = []
        for base in self.bases.get(cls, []):
            out += [f for f in self.all_fields(base) if f not in out]
        return out + [f for f in self.fields.get(cls, {}) if f not in out]

    def members(self, node: ast.expr, depth: int = 0) -> list[ast.expr]:
        """The top-level members of a union annotation, aliases and Optional/Union/Annotated unwrapped."""
        if depth > 8:
            return [node]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted forward reference
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return [node]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.members(node.left, depth + 1) + self.members(node.right, depth + 1)
        if isinstance(node, ast.Subscript):
            head = ast.unparse(node.value).split(".")[-1]
            inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if head == "Optional":
                return self.members(inner[0], depth + 1) + [ast.Constant(None)]
            if head == "Union":
                return [m for e in inner for m in self.members(e, depth + 1)]
            if head in ("Annotated", "SkipValidation"):  # pydantic's SkipValidation[T] is Annotated[T, ...]
                return self.members(inner[0], depth + 1)
        if isinstance(node, ast.Name) and node.id in self.aliases and node.id not in self.fields:
            return self.members(self.aliases[node.id], depth + 1)
        return [node]

    def kind(self, annotation) -> str:
        """What argparse does with a field of this type in vLLM's _compute_kwargs."""
        if annotation is None:
            return VALUE
        heads = []
        for member in self.members(annotation):
            if isinstance(member, ast.Constant) and member.value is None:
                heads.append("None")
            elif isinstance(member, ast.Subscript):
                heads.append(ast.unparse(member.value).split(".")[-1])
            else:
                heads.append(ast.unparse(member).split(".")[-1])
        if any(h in self.fields and h not in ("bool", "str") for h in heads if h[:1].isupper()) \
                and not any(h in ("list", "tuple", "set") for h in heads):
            return VALUE  # a config dataclass: one JSON value
        if set(heads) == {"bool", "str", "None"}:
            return OPTIONAL
        if "bool" in heads:
            return FLAG
        if "Literal" in heads:
            return VALUE
        if any(h in ("list", "tuple", "set", "List", "Tuple", "Set") for h in heads):
            return LIST
        return VALUE


def _kind_of_call(call: ast.Call) -> str | None:
    """The kind an add_argument call's explicit keywords give, or None when they say nothing about it."""
    words = {k.arg: k.value for k in call.keywords if k.arg}
    action = words.get("action")
    if action is not None:
        text = ast.unparse(action)
        if "BooleanOptionalAction" in text:
            return "negatable"
        if isinstance(action, ast.Constant) and action.value in _STORE_FLAG:
            return FLAG
        if isinstance(action, ast.Constant) and action.value == "append":
            return VALUE
    nargs = words.get("nargs")
    if isinstance(nargs, ast.Constant):
        if nargs.value == "?":
            return OPTIONAL
        if nargs.value in ("+", "*") or isinstance(nargs.value, int) and nargs.value > 1:
            return LIST
    if "type" in words or "choices" in words or "default" in words or "help" in words:
        return VALUE
    return None


class Overrides:
    """`X["field"]["action"] = ...` and `del X["field"]["nargs"]` written after get_kwargs, per field name."""

    def __init__(self, tree: ast.AST) -> None:
        self.kind: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self._note(target, node.value)
            elif isinstance(node, ast.Delete):
                for target in node.targets:
                    self._note(target, None)

    def _note(self, target, value) -> None:
        if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Subscript)):
            return
        key, field = target.slice, target.value.slice
        if not (isinstance(key, ast.Constant) and isinstance(field, ast.Constant) and isinstance(field.value, str)):
            return
        if key.value == "nargs" and value is None:
            self.kind[field.value] = VALUE
        elif key.value == "nargs" and isinstance(value, ast.Constant):
            self.kind[field.value] = OPTIONAL if value.value == "?" else LIST
        elif key.value == "action" and isinstance(value, ast.Constant) and value.value == "append":
            self.kind[field.value] = VALUE
        elif key.value == "action" and isinstance(value, ast.Constant) and value.value in _STORE_FLAG:
            self.kind[field.value] = FLAG


def _get_kwargs_class(value: ast.expr) -> str | None:
    """`get_kwargs(Cls)` (possibly wrapped, e.g. `cls._customize_cli_kwargs(get_kwargs(cls))`) -> "Cls"."""
    for node in ast.walk(value):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("get_kwargs") and node.args:
            return ast.unparse(node.args[0]).split(".")[-1]
    return None


def _functions(tree: ast.Module, names: set[str]):
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in names:
                    yield node.name, item
        elif isinstance(node, ast.FunctionDef) and node.name in names and node.col_offset == 0:
            yield None, node


def options(source: Source) -> dict[str, str]:
    """{option string: kind} of `vllm serve` in this tree."""
    types = Types(source)
    found: dict[str, str] = {"-h": FLAG, "--help": FLAG}
    enable_disable = any("class EnableDisableAction" in source.files[n]
                         for n in source.find("EnableDisableAction", "vllm/utils"))

    def add(names: list[str], kind: str) -> None:
        for name in names:
            found[name] = FLAG if kind == "negatable" else kind
        if kind != "negatable":
            return
        for name in names:
            if name.startswith("--"):
                found["--no-" + name[2:]] = FLAG
                for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                    if enable_disable and name.startswith(prefix):
                        found[inverse + name[len(prefix):]] = FLAG

    def field_kind(cls: str, field: str, overrides: Overrides) -> str:
        if field in overrides.kind:
            return overrides.kind[field]
        kind = types.kind(types.field(cls, field))
        return "negatable" if kind == FLAG else kind

    parser_files = [n for n in source.find("def make_arg_parser", "vllm/entrypoints")
                    if '"--headless"' in source.files[n] or "'--headless'" in source.files[n]]
    engine_files = [n for n in source.find("def add_cli_args", "vllm/engine") if n.endswith("arg_utils.py")]
    if not parser_files or not engine_files:
        raise SystemExit("no make_arg_parser with --headless or no engine/arg_utils.py: not a vLLM tree")
    for name in parser_files + engine_files:
        tree = source.tree(name)
        overrides = Overrides(tree)
        for owner, function in _functions(tree, {"add_cli_args", "make_arg_parser"}):
            bound: dict[str, str] = {}  # local name -> the class whose get_kwargs it holds
            for node in ast.walk(function):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    cls = _get_kwargs_class(node.value)
                    if cls is not None:
                        bound[node.targets[0].id] = owner if cls == "cls" and owner else cls
            for node in ast.walk(function):
                if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) \
                        and ast.unparse(node.iter).endswith(".items()"):
                    held = ast.unparse(node.iter.func.value)
                    if held in bound:  # every field of the frontend dataclass, as --field-name
                        cls = "FrontendArgs" if bound[held] in (owner, "cls") else bound[held]
                        for field in types.all_fields(cls):
                            add([f"--{field.replace('_', '-')}"], field_kind(cls, field, overrides))
                    continue
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "add_argument"):
                    continue
                names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                         and a.value.startswith("-")]
                if not names:
                    continue
                kind = _kind_of_call(node)
                for keyword in node.keywords:
                    if keyword.arg is not None:
                        continue
                    # `**X["field"]`, also inside `**{**X["field"], "default": None}`
                    for part in ast.walk(keyword.value):
                        if isinstance(part, ast.Subscript) and isinstance(part.slice, ast.Constant):
                            held = ast.unparse(part.value)
                            if held in bound:
                                kind = field_kind(bound[held], part.slice.value, overrides)
                add(names, kind or VALUE)
    return dict(sorted(found.items()))


def main(argv: list[str]) -> int:
    out = {}
    for item in argv:
        version, _, where = item.partition("=")
        found = options(Source(where))
        out[version] = {kind: sorted(o for o, k in found.items() if k == kind) for kind in (FLAG, VALUE, OPTIONAL, LIST)}
    sys.stdout.write("{\n" + ",\n".join(
        f'"{version}": {{' + ", ".join(f'"{kind}": {json.dumps(names)}' for kind, names in kinds.items()) + "}"
        for version, kinds in sorted(out.items())) + "\n}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
