"""The spec's JSON Schema: loaded once from the package, every error rewritten for people and located."""

from __future__ import annotations

import difflib
import functools
import itertools
import json
import math
from dataclasses import replace
from importlib import resources
from typing import Optional

from deployctl.errors import Problem
from deployctl.spec.locate import Document, Path
from deployctl.spec.show import control_character, quoted

SUPPORTED_VERSIONS = (1,)
INSTANCE_MODEL_KEYS = ("max_num_seqs", "max_num_batched_tokens", "extra_args")
MAX_SCHEMA_ERRORS = 1000

_TYPE_NAMES = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping (key: value)",
    "null": "null",
}
_YAML_TYPE_NAMES = {bool: "true/false", int: "an integer", float: "a number", str: "a string",
                    list: "a list", dict: "a mapping", type(None): "null"}


def schema_text() -> str:
    """The schema file as shipped in the package (what `deployctl schema` prints)."""
    return resources.files("deployctl.spec").joinpath("schema.json").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def load_schema() -> dict:
    return json.loads(schema_text())


@functools.lru_cache(maxsize=1)
def _validator():
    # Built once per process: constructing a validator (and resolving $refs) is the costly part.
    from jsonschema import Draft202012Validator, validators

    # JSON Schema calls 8080.0 an integer; a port or device id written 8080.0 renders as "8080.0", so not here.
    checker = Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool))
    return validators.extend(Draft202012Validator, type_checker=checker)(load_schema(), format_checker=_formats())


# The one checker of each kind of value, named by the schema's `format` (the schema marks every key of that kind,
# so a new key is checked by saying what it is): (checker, hint). A checker returns why a value is refused, or None.
def _image_reference(value: str):
    from deployctl.spec.image_reference import image_reference_problem

    return image_reference_problem(value)


def _host_path(value: str):
    from deployctl.spec.paths import host_path_problem

    return host_path_problem(value)


# name -> (checker, hint, how the message joins the value and the reason)
FORMATS = {
    "image-reference": (_image_reference, "e.g. registry.example:5000/team/vllm-ascend:6.3.909", ": "),
    "host-path": (_host_path, "an absolute path on the hosts, e.g. /mnt/weights/llama2-13b", " "),
}


def format_keys(name: str) -> list[Path]:
    """The spec paths the schema marks `format: name` (a list item is `*`, a mapping's value `<name>`)."""
    found: list[Path] = []

    def walk(node, path: Path) -> None:
        if not isinstance(node, dict):
            return
        if node.get("format") == name:
            found.append(path)
        for key, value in node.get("properties", {}).items():
            walk(value, path + (key,))
        if isinstance(node.get("items"), dict):
            walk(node["items"], path + ("*",))
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], path + ("<name>",))
        for key in ("oneOf", "anyOf", "allOf"):
            for sub in node.get(key, []):
                walk(sub, path)

    walk(load_schema(), ())
    return found


def _formats():
    from jsonschema import FormatChecker

    formats = FormatChecker(formats=())
    for name, (check, _hint, _join) in FORMATS.items():
        def conforms(value, check=check) -> bool:
            why = check(value) if isinstance(value, str) else None
            if why:
                raise ValueError(why)
            return True
        formats.checks(name, raises=ValueError)(conforms)
    return formats


def non_finite_numbers(data, path: Path = ()):
    """(path, value) of every NaN or infinity anywhere in the document, free-form mappings (compilation_config,
    additional_config) included: YAML's .nan and .inf load as floats, and no key of a spec means one."""
    if isinstance(data, float) and not math.isfinite(data):
        yield path, data
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from non_finite_numbers(value, path + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from non_finite_numbers(value, path + (index,))


def check_schema(document: Document, filename: str) -> tuple[list[Problem], set]:
    """Every schema violation of the document, located; plus the paths that failed (rules skip them)."""
    problems: list[Problem] = []
    failed: set = set()
    # Bounded: a 1 MB list of wrong values would otherwise cost seconds here and in rendering.
    errors = list(itertools.islice(_validator().iter_errors(document.data), MAX_SCHEMA_ERRORS))
    typed = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    empty = {tuple(e.absolute_path) for e in errors if e.validator == "minLength"}
    cards = _cards(document.data)
    for error in errors:
        path = tuple(error.absolute_path)
        if error.validator != "type" and path in typed:
            continue  # "should be an integer" says it all; the enum/minimum of the same value adds noise
        if error.validator in ("pattern", "format") and path in empty:
            continue  # likewise "should not be empty" before "is not a valid served name"
        for problem, at_key in _rewrite(error, path, cards):
            line, column = document.locate(problem.path, key=at_key)
            problems.append(replace(problem, path=_printable(problem.path), file=filename, line=line, column=column))
            failed.add(problem.path)
    for path, value in itertools.islice(non_finite_numbers(document.data), MAX_SCHEMA_ERRORS):
        line, column = document.locate(path)
        problems.append(Problem(_printable(path), f"{'.nan' if math.isnan(value) else '-.inf' if value < 0 else '.inf'} is not a finite number", file=filename, line=line,
                                column=column, hint="write a number (or quote the text: \".nan\")"))
        failed.add(path)
    return _unique(problems), failed


def _printable(path: Path) -> Path:
    """A key with a newline or NUL would break the one-line `file:line:col: path: message`: escape it."""
    return tuple(repr(part)[1:-1] if isinstance(part, str) and control_character(part) else part for part in path)


def written_cards(data) -> Optional[int]:
    """requirements.cards when the document writes a usable count (device ids are 0..cards-1), else None."""
    requirements = data.get("requirements") if isinstance(data, dict) else None
    cards = requirements.get("cards") if isinstance(requirements, dict) else None
    return cards if isinstance(cards, int) and not isinstance(cards, bool) and cards >= 1 else None


def _cards(data) -> int:
    """requirements.cards when it is a usable count, else the default 8."""
    written = written_cards(data)
    return 8 if written is None else written


def _rewrite(error, path: Path, cards: int = 8) -> list[tuple[Problem, bool]]:
    """One jsonschema error -> the Problems a person reads (one per unknown or missing key)."""
    kind, instance, expected = error.validator, error.instance, error.validator_value
    if kind == "additionalProperties" and isinstance(instance, dict):
        known = list(error.schema.get("properties", {}))
        return [(_unknown_key(path, key, known), True) for key in instance if key not in known]
    if kind == "required" and isinstance(instance, dict):
        return [(Problem(path + (key,), f"missing required key '{key}'"), False)
                for key in expected if key not in instance and not (key == "hosts" and "host" in instance)]
    if "propertyNames" in error.relative_schema_path:  # the key itself is bad (reported at the mapping)
        return [(_bad_key_name(path, instance), True)]
    return [(Problem(path, *_value_message(kind, instance, expected, path, error, cards)), False)]


def _unknown_key(path: Path, key: str, known: list[str]) -> Problem:
    where = path + (key,)
    shared_model_keys = load_schema()["properties"]["model"]["properties"]
    if len(path) > 1 and path[-1] == "model" and key in shared_model_keys:
        return Problem(where, f"'{key}' cannot be set per instance; an instance's model may set only "
                              f"{', '.join(INSTANCE_MODEL_KEYS)}", hint="set it in the top-level model section")
    from deployctl.servers import FLAVOURS

    carried = next(filter(None, (f.carried_key(key, known) for f in FLAVOURS.values())), None)
    if carried is not None:  # another server's key, carried over (vllm-ascend names AscendCloud's)
        return Problem(where, carried[0], hint=carried[1])
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    message = f"unknown key {quoted(key)}" + (f" — did you mean '{close[0]}'?" if close else "")
    hint = None if close else f"known keys here: {', '.join(known)}"
    return Problem(where, message, hint=hint)


def _bad_key_name(path: Path, name) -> Problem:
    where = str(path[-1]) if path else ""
    if where == "hosts":
        return Problem(path + (str(name),), f"{quoted(name)} is not a valid host name: use 1 to 63 letters, digits, "
                       "'.', '_' and '-', starting with a letter or digit", hint="host names become file names")
    if where == "env":
        return Problem(path + (str(name),), f"{quoted(name)} is not an environment variable name",
                       hint="letters, digits and '_', not starting with a digit")
    return Problem(path + (str(name),), f"{quoted(name)} is not a valid key")


_PATTERNS = {
    ("name",): ("is not a valid deployment name: use 1 to 40 lowercase letters, digits and '-'",
                "it labels containers and names them <name>-<role>-<index>"),
    ("weights", "credentials"): ("should be env or profile:<name>", None),
    ("weights", "source"): ("is not s3://, obs:// or an absolute local path",
                            "e.g. s3://bucket/models/llama2-13b/, obs://bucket/models/llama2-13b/ or /data/llama2-13b"),
    ("image", "build", "packages"): ("is not a local path, s3:// or obs://",
                                     "the AscendCloud zip: a path (relative to the spec file) or an s3:// / obs:// URL"),
    ("server_version",): ("is not a vllm-ascend or vLLM version", "e.g. 0.13, v0.13.0rc1, 0.11.0.post1 or 0.32.0"),
    ("model", "served_name"): ("is not a valid served name: use up to 128 letters, digits, '.', '_', ':' and '-', "
                               "starting with a letter or digit",
                               "it is an argv word and a directory name (Triton's model repository)"),
}


def _value_message(kind: str, value, expected, path: Path, error, cards: int = 8) -> tuple[str, str | None]:
    """(message, hint) for a violation of one value; the message starts with the value, quoted."""
    last = path[-1] if path else ""
    shown = quoted(value)
    if kind == "type":
        return _type_message(value, expected, path)
    if kind == "enum" and path == ("version",):
        supported = ", ".join(str(v) for v in SUPPORTED_VERSIONS)
        return f"unsupported version {shown}; supported versions: {supported}", None
    if kind == "enum":
        choices = [_show(choice) for choice in expected]
        close = difflib.get_close_matches(str(value), [c for c in choices if c != "null"], n=1, cutoff=0.6)
        suggestion = f" — did you mean '{close[0]}'?" if close else ""
        if len(choices) > 8:  # the model families: too many to list in one line
            return f"{shown} is not a known {last}{suggestion}", f"known: {', '.join(choices)}"
        return f"{shown} is not one of {', '.join(choices)}{suggestion}", None
    if kind in ("minimum", "maximum") and isinstance(last, str) and last.endswith("port"):
        return f"{shown} is not a port (1-65535)", None
    if kind in ("minimum", "maximum") and isinstance(last, int) and len(path) > 1 and path[-2] == "devices":
        return (f"{shown} is not a device id (cards: 0-{cards - 1})",
                "requirements.cards sets how many devices each host has")
    if kind == "minimum":
        return f"{shown} should be at least {expected}", None
    if kind == "maximum":
        return f"{shown} should be at most {expected}", None
    if kind == "exclusiveMinimum":
        return f"{shown} should be more than {expected}", None
    if kind == "exclusiveMaximum":
        return f"{shown} should be less than {expected}", None
    if kind == "pattern" and last == "shm_size":
        return f"{shown} is not a size docker's --shm-size takes", "a number and k, m or g, e.g. 16g"
    if kind == "pattern" and last == "cpu":
        return f"{shown} is not a Kubernetes CPU quantity", "whole or decimal CPUs or millicores, e.g. 16, 1.5 or 500m"
    if kind == "pattern" and last == "memory":
        return f"{shown} is not a Kubernetes memory quantity", "a number and Ki, Mi, Gi, Ti (or k, M, G, T), e.g. 256Gi"
    if kind == "pattern" and path in _PATTERNS:
        message, hint = _PATTERNS[path]
        return f"{shown} {message}", hint
    if kind == "pattern":
        return f"{shown} does not match {expected}", None
    if kind == "format" and expected in FORMATS:
        _check, hint, join = FORMATS[expected]
        return f"{shown}{join}{error.cause}", hint
    if kind == "minItems" and last == "devices":
        return f"{shown} is empty: an instance needs at least one device", None
    if kind == "minItems" and isinstance(expected, int) and expected > 1:
        return f"{shown} is too short (at least {expected} items)", None
    if kind in ("minItems", "minLength", "minProperties"):
        return f"{shown} should not be empty", None
    if kind in ("maxItems", "maxLength", "maxProperties"):
        return f"{shown} is too long (at most {expected})", None
    return f"{shown}: {error.message}", None


def _type_message(value, expected, path: Path) -> tuple[str, str | None]:
    names = expected if isinstance(expected, list) else [expected]
    wanted = " or ".join(_TYPE_NAMES.get(n, n) for n in names)
    got = _YAML_TYPE_NAMES.get(type(value), type(value).__name__)
    message = f"{quoted(value)} should be {wanted}, not {got}"
    hint = None
    if "string" in names and isinstance(value, (int, float)) and not isinstance(value, bool):
        hint = f'quote it: "{value}"'
    elif "string" in names and isinstance(value, bool):
        hint = f'quote it: "{str(value).lower()}"'
    elif "integer" in names and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        hint = f"write it without quotes: {value.strip()}"
    elif len(path) == 2 and path[0] == "hooks" and isinstance(value, list):
        hint = f"a hook is a mapping: {path[1]}: {{command: [{', '.join(map(str, value[:3]))}]}}"
    return message, hint


def _show(value) -> str:
    return "null" if value is None else str(value)


def _unique(problems: list[Problem]) -> list[Problem]:
    seen, out = set(), []
    for problem in problems:
        key = (problem.path, problem.message)
        if key not in seen:
            seen.add(key)
            out.append(problem)
    return out
