"""Rules on the model's settings and the values a spec carries: batched tokens and the KV cache, the table of
known models' limits, env values and the served name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from deployctl.errors import Problem
from deployctl.spec import known_models
from deployctl.spec.secret_names import looks_secret
from deployctl.spec.show import control_character, quoted

if TYPE_CHECKING:
    from deployctl.spec.rules import Context


def check_batched_tokens(c: Context) -> Iterator[Problem]:
    """max_num_batched_tokens >= max_model_len, on the values each instance ends up with."""
    max_len = c.value(("model", "max_model_len"), int)
    shared = c.value(("model", "max_num_batched_tokens"), int)
    if max_len is None:
        return
    shared_used = not (c.workers or c.groups)
    for unit in c.workers + c.groups:
        path = unit.path + ("model", "max_num_batched_tokens")
        if isinstance(unit.data.get("model"), dict) and "max_num_batched_tokens" in unit.data["model"]:
            own = c.value(path, int)
            if own is not None and own < max_len:
                yield Problem(path, f"max_num_batched_tokens {own} is less than max_model_len {max_len}",
                              hint="vLLM refuses to start; raise it to at least max_model_len")
        else:
            shared_used = True
    if shared is not None and shared_used and shared < max_len:
        yield Problem(("model", "max_num_batched_tokens"),
                      f"max_num_batched_tokens {shared} is less than max_model_len {max_len}",
                      hint="vLLM refuses to start; raise it to at least max_model_len")


def check_kv_cache(c: Context) -> Iterator[Problem]:
    """int8 needs its scales file, where the flavour takes kv_cache_dtype at all (else the field table refuses it)."""
    if not c.flavour.renders("kv_cache_dtype"):
        return
    if c.value(("model", "kv_cache_dtype"), str) == "int8" and not c.value(("model", "quantization_param_path"), str):
        if c.ok(("model", "quantization_param_path")):
            yield Problem(("model", "kv_cache_dtype"), "kv_cache_dtype int8 needs quantization_param_path",
                          hint="the KV cache scales file on the hosts, e.g. <weights.dest>/kv_cache_scales.json")


def check_model_table(c: Context) -> Iterator[Problem]:
    """Seed 000's table: refuse too few cards, warn when max_model_len exceeds what the cards hold."""
    memory = c.value(("requirements", "npu_memory_gb"), int)
    size = known_models.memory_class(memory)
    if c.platform != "ascend" or size is None:
        return
    family = known_models.family_for(c.value(("model", "family"), str), c.value(("model", "served_name"), str),
                               c.value(("weights", "source"), str), c.value(("weights", "dest"), str))
    if family is None:
        return
    limits = known_models.model_table()[family].on(size)
    if limits is None:
        other = known_models.model_table()[family].on_64gb
        need = f" (64 GB cards: at least {other.min_cards})" if other else ""
        yield Problem(("requirements", "npu_memory_gb"), f"{family} does not run on {size} GB cards{need}")
        return
    for path, count, what in _card_counts(c):
        if count < limits.min_cards:
            yield Problem(path, f"{family} needs at least {limits.min_cards} cards of {size} GB; {what}")
    max_len = c.value(("model", "max_model_len"), int)
    if max_len is not None and max_len > limits.max_model_len:
        yield Problem(("model", "max_model_len"),
                      f"max_model_len {max_len} exceeds {limits.max_model_len_k}K ({limits.max_model_len}), "
                      f"the most {family} supports on {size} GB cards", severity="warning")


def _card_counts(c: Context) -> Iterator[tuple[tuple, int, str]]:
    """(path, cards, what it says) of every server: an instance's devices, or a vllm-ascend group's ranks."""
    for unit in c.workers:
        devices = c.devices(unit)
        if devices:
            yield unit.path + ("devices",), len(devices), f"this instance has {len(devices)}"
    yield from c.flavour.card_counts(c)


def env_maps(c: Context) -> Iterator[tuple[tuple, dict]]:
    """(path, mapping) of every `env:` in the spec: the top-level one, then each DP group's (vllm-ascend)."""
    yield ("env",), c.value(("env",), dict) or {}
    for unit in c.groups:
        yield unit.path + ("env",), c.value(unit.path + ("env",), dict) or {}


def check_env(c: Context) -> Iterator[Problem]:
    """The same rules for every env mapping: no control character in a value (the env file holds one
    NAME=value a line, so a newline would write a second variable: HF_TOKEN=$'x\nLD_PRELOAD=...'), and a WARN
    on a literal value under a name that says secret (secret_names.py, the list `export` refuses by)."""
    for where, mapping in env_maps(c):
        for name, value in mapping.items():
            path = where + (name,)
            if not c.ok(path):
                continue
            original = c.references.get(path)
            yield from _control_characters(path, value, original)
            if original is None and looks_secret(name):
                yield Problem(path, f"{name} looks like a secret, and its value is written in the spec: it would "
                                    "be passed on the docker command line and shown by plan and in exports",
                              hint=f"write {name}: \"${{{name}}}\" and set {name} where deployctl runs: then it "
                                   "reaches the container through a 0600 env file (a secretKeyRef in exports)",
                              severity="warning")


def _control_characters(path: tuple, value, original) -> Iterator[Problem]:
    char = control_character(value) if isinstance(value, str) else None
    if char is None:
        return
    if original is not None:  # a Secret: name the variable, never the value
        yield Problem(path, f"the value of {quoted(original)} contains {char}; control characters are not "
                            f"allowed in env values",
                      hint="an env file holds one NAME=value per line: remove the character from the variable")
    else:
        yield Problem(path, f"{quoted(value)} contains {char}; control characters are not allowed in env "
                            f"values", hint="an env file holds one NAME=value per line")


def check_model_fields(c: Context) -> Iterator[Problem]:
    """Every engine field the spec sets reaches the flavour's server, or is refused here at its path: the flavour's
    field table (servers/<flavour>.py) refuses what that server would refuse or drop."""
    from deployctl.servers.fields import Flag, Refused

    places = [("model",)] + [unit.path + ("model",) for unit in c.workers + c.groups]
    for row in c.flavour.table:
        for where in places:
            mapping = c.value(where, dict) or {}
            if row.field not in mapping or not c.ok(where + (row.field,)):
                continue
            value = mapping[row.field]
            if isinstance(row, Refused) and row.refuses(value):
                yield Problem(where + (row.field,), row.message, hint=row.hint or None)
            elif isinstance(row, Flag) and row.after and value is not None and mapping.get(row.after) is None:
                yield Problem(where + (row.field,), f"{row.field} is read only with {row.after}, which this spec "
                                                    f"does not set: the server would never see it",
                              hint=f"set {row.after}, or remove {row.field}")
