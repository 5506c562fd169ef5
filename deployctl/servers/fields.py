"""A flavour's table of spec fields -> engine flags (or Triton's model.json keys), and the one function that renders
any table (pure). A row names a spec `model` field, or a derived value (`@model`, `@tp`, ...) that the flavour puts
at that place in its command line; the table's order is the argv's order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

from deployctl.spec.model import Instance, Spec

VERBATIM = "..."  # a row whose value is already argv words (extra_args, the DP flags): spliced as they are
POSITIONAL = ""  # a row whose value is one word without a flag (`vllm serve MODEL`)


@dataclass(frozen=True)
class Flag:
    """`field`'s value rendered as `flag value` (or a model.json key), when it is set; `after` names a field
    that must be set too (quantization_param_path is read only with kv_cache_dtype)."""

    field: str
    flag: str
    after: Optional[str] = None
    target: str = "argv"  # where it goes: the server's argv, or a file the flavour writes (Triton: "model.json")
    read: Optional[Callable[[Any], Any]] = None  # what the server is given from the value (None: the value itself)

    def given(self, value: Any) -> Any:
        return self.read(value) if self.read is not None else value


@dataclass(frozen=True)
class Refused:
    """`field` is refused by `validate` for this flavour (for `values` only, when given): the server would refuse
    it at start, or silently ignore it."""

    field: str
    message: str
    hint: str = ""
    values: Optional[tuple] = None  # None: any value
    allows: Optional[Callable[[Any], bool]] = None  # a value it lets through (Triton: the extra args it reads)

    def refuses(self, value: Any) -> bool:
        if value in (None, (), [], {}) or (self.values is not None and value not in self.values):
            return False
        return not (self.allows is not None and self.allows(value))


@dataclass(frozen=True)
class Deployctl:
    """`field` is read by deployctl itself, never by the server (say where, in `why`)."""

    field: str
    why: str


Row = Union[Flag, Refused, Deployctl]
Table = tuple  # of Rows
Value = Union[None, str, int, bool, tuple, Callable[[tuple], tuple]]


def flag_rows(table: Table, target: Optional[str] = None) -> tuple[Flag, ...]:
    return tuple(row for row in table if isinstance(row, Flag) and target in (None, row.target))


def rows_for(table: Table, field: str) -> tuple[Row, ...]:
    return tuple(row for row in table if row.field == field)


def model_values(spec: Spec, instance: Instance) -> dict[str, Value]:
    """Every spec field a table may name, as one instance ends up with it (per-instance values win), plus the
    values every flavour derives the same way."""
    model = spec.model
    json_args = dict(instance.json_args)
    return {
        "served_name": model.served_name,
        "max_model_len": model.max_model_len,
        "max_num_seqs": instance.max_num_seqs,
        "max_num_batched_tokens": instance.max_num_batched_tokens,
        "quantization": model.quantization,
        "kv_cache_dtype": model.kv_cache_dtype,
        "quantization_param_path": model.quantization_param_path,
        "extra_args": tuple(instance.extra_args),
        "additional_config": json_args.get("--additional-config"),
        "compilation_config": json_args.get("--compilation-config"),
        "@speculative": json_args.get("--speculative-config"),
        "family": model.family,
        "@model": spec.weights.dest or "/model",
        "@tp": instance.tp,
        "@host": "0.0.0.0",
        "@port": instance.port,
    }


def _is_set(value: Value) -> bool:
    return value is not None and value != ()


def render_flags(table: Table, values: Mapping[str, Value], target: str = "argv") -> tuple[str, ...]:
    """The argv words of a table: each Flag row whose value is set, in table order; a callable value gets the
    words rendered so far (a profile's default flags look at them)."""
    words: list[str] = []
    for row in flag_rows(table, target):
        value = values.get(row.field)
        if callable(value):
            value = value(tuple(words))
        value = row.given(value)
        if not _is_set(value) or (row.after is not None and not _is_set(values.get(row.after))):
            continue
        if row.flag == VERBATIM:  # as they are: an export's words may be Expanded kubelet references
            words += list(value)
        elif row.flag == POSITIONAL:
            words.append(_word(value))
        else:
            words += [row.flag, _word(value)]
    return tuple(words)


def _word(value: Value) -> str:
    return value if isinstance(value, str) else str(value)


def render_keys(table: Table, values: Mapping[str, Value], target: str) -> dict:
    """The rows of a table whose flags are JSON keys (Triton's model.json): {key: value} for each set one."""
    out: dict = {}
    for row in flag_rows(table, target):
        value = row.given(values.get(row.field))
        if _is_set(value) and (row.after is None or _is_set(values.get(row.after))):
            out[row.flag] = value
    return out

