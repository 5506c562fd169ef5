"""Every engine field of the spec reaches every server flavour that accepts it, or `validate` refuses it there
(contract, "Settled on 2026-11-25"): each field of schema.json's `model` (and vllm-ascend's per-group `model`), for
each flavour, is found with its value in the rendered argv (Triton: in 1/model.json), or is refused at its path.
A field added to the schema without a row in every flavour's table fails here."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

import deployctl
from deployctl.errors import SpecError
from deployctl.plan.containers import container_for
from deployctl.servers import FLAVOURS
from deployctl.servers.fields import POSITIONAL, VERBATIM, Deployctl, Flag, Refused, rows_for
from deployctl.servers.triton.repository import engine_args
from deployctl.servers.vllm_ascend.upstream import HostNetwork
from deployctl.spec.load import load_spec_text

SCHEMA = json.loads((Path(deployctl.__file__).parent / "spec" / "schema.json").read_text())
MODEL_FIELDS = tuple(SCHEMA["properties"]["model"]["properties"])
GROUP_FIELDS = tuple(SCHEMA["$defs"]["group_model"]["properties"])
SCALES = "/mnt/weights/demo/kv_cache_scales.json"

# A value for each field (a list: each one is tried), and what it needs beside it to be valid on its own.
SAMPLES = {
    "served_name": ["demo-model"],
    "family": ["llama2-7b"],
    "moe": [True, False],
    "max_model_len": [4096],
    "max_num_seqs": [7],
    "max_num_batched_tokens": [8192],
    "quantization": [v for v in SCHEMA["properties"]["model"]["properties"]["quantization"]["enum"] if v],
    "kv_cache_dtype": ["int8"],
    "quantization_param_path": [SCALES],
    "extra_args": [["--enforce-eager"], ["--gpu-memory-utilization", "0.8"]],
    "additional_config": [{"ascend_compilation_config": {"enable_npugraph_ex": True}}],
    "compilation_config": [{"cudagraph_mode": "FULL_DECODE_ONLY"}],
}
COMPANIONS = {"kv_cache_dtype": {"quantization_param_path": SCALES},
              "quantization_param_path": {"kv_cache_dtype": "int8"}}

BASE = {
    ("ascend", "vllm"): {
        "version": 1, "name": "fields", "hosts": {"node1": {"address": "10.0.0.1"}},
        "weights": {"dest": "/mnt/weights/demo"}, "model": {"served_name": "demo-model"},
        "topology": {"mode": "mixed", "instances": [{"host": "node1", "devices": [0], "port": 8000}]},
    },
    ("gpu", "vllm"): {
        "version": 1, "name": "fields", "platform": "gpu", "hosts": {"gpu1": {"address": "10.0.0.1"}},
        "weights": {"dest": "/mnt/weights/demo"}, "model": {"served_name": "demo-model"},
        "topology": {"mode": "mixed", "instances": [{"host": "gpu1", "devices": [0], "port": 8000}]},
    },
    ("gpu", "triton"): {
        "version": 1, "name": "fields", "platform": "gpu", "server": "triton",
        "hosts": {"gpu1": {"address": "10.0.0.1"}},
        "weights": {"dest": "/mnt/weights/demo"}, "model": {"served_name": "demo-model"},
        "topology": {"mode": "mixed", "instances": [{"host": "gpu1", "devices": [0], "port": 8000}]},
    },
    ("gpu", "sglang"): {
        "version": 1, "name": "fields", "platform": "gpu", "server": "sglang",
        "hosts": {"gpu1": {"address": "10.0.0.1"}},
        "weights": {"dest": "/mnt/weights/demo"}, "model": {"served_name": "demo-model"},
        "topology": {"mode": "mixed", "instances": [{"host": "gpu1", "devices": [0], "port": 8000}]},
    },
    ("ascend", "sglang"): {
        "version": 1, "name": "fields", "server": "sglang",
        "hosts": {"node1": {"address": "10.0.0.1"}},
        "weights": {"dest": "/mnt/weights/demo"}, "model": {"served_name": "demo-model"},
        "topology": {"mode": "mixed", "instances": [{"host": "node1", "devices": [0], "port": 8000}]},
    },
    ("ascend", "vllm-ascend"): {
        "version": 1, "name": "fields", "server": "vllm-ascend", "server_version": "0.13",
        "hosts": {"node1": {"address": "10.0.0.1"}}, "weights": {"dest": "/mnt/weights/demo"},
        "model": {"served_name": "demo-model"},
        "topology": {"mode": "mixed", "groups": [{"hosts": ["node1"], "dp": 1, "tp": 1, "port": 8000}]},
    },
}


def cases():
    for key in FLAVOURS:
        for field in MODEL_FIELDS:
            for value in SAMPLES.get(field, [None]):
                yield pytest.param(key, ("model",), field, value, id=f"{key[0]}-{key[1]}-model.{field}={value}")
        unit = ("topology", "groups", 0) if FLAVOURS[key].dp_groups else ("topology", "instances", 0)
        per_unit = GROUP_FIELDS if FLAVOURS[key].dp_groups else tuple(
            SCHEMA["$defs"]["instance"]["properties"]["model"]["properties"])
        for field in per_unit:
            for value in SAMPLES.get(field, [None]):
                yield pytest.param(key, unit + ("model",), field, value,
                                   id=f"{key[0]}-{key[1]}-{'.'.join(map(str, unit))}.model.{field}={value}")


def document(key, where, field, value) -> dict:
    doc = copy.deepcopy(BASE[key])
    node = doc
    for part in where:
        node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
    node[field] = value
    node.update(COMPANIONS.get(field, {}))
    return doc


def rendered(spec) -> list[tuple[tuple, dict]]:
    """(argv, model.json keys) of every server the spec runs."""
    networks = {h.name: HostNetwork("10.0.0.1", "eth0", npus=8) for h in spec.hosts}
    out = []
    for instance in spec.api_servers:
        container = container_for(spec, instance, None, networks)
        keys = engine_args(spec, instance) if spec.server == "triton" else {}
        out.append((tuple(container.command), keys))
    return out


def found(row: Flag, value, argv: tuple, keys: dict) -> bool:
    if row.target != "argv":
        return keys.get(row.flag) == row.given(value)
    if row.flag == VERBATIM:
        words = [str(w) for w in value]
        return any(list(argv[i:i + len(words)]) == words for i in range(len(argv)))
    if row.flag == POSITIONAL:
        return str(value) in argv
    for i, word in enumerate(argv[:-1]):
        if word == row.flag:
            given = argv[i + 1]
            if isinstance(value, dict) and json.loads(given) == value or given == str(value):
                return True
    return False


@pytest.mark.parametrize("key,where,field,value", list(cases()))
def test_every_model_field_reaches_the_server_or_is_refused(key, where, field, value):
    flavour = FLAVOURS[key]
    assert field in SAMPLES, f"{field} is new in the schema: give it sample values here and a row in every table"
    rows = rows_for(flavour.table, field)
    assert rows, (f"{flavour.title}: {field} has no row in its field table (servers/): map it, refuse it, or say "
                  f"why deployctl reads it")
    text = yaml.safe_dump(document(key, where, field, value), sort_keys=False)
    try:
        spec = load_spec_text(text)
    except SpecError as error:
        at = [p for p in error.problems if p.path == where + (field,)]
        assert at, f"{flavour.title}: {field}={value!r} refused elsewhere: {[p.render() for p in error.problems]}"
        assert any(isinstance(r, Refused) and r.refuses(value) and r.message == at[0].message for r in rows), (
            f"{flavour.title}: {field} refused by a rule that is not in its field table: {at[0].message}")
        ours = {where + (f,) for f in (field, *COMPANIONS.get(field, {}))}
        assert all(p.path in ours for p in error.problems), [p.render() for p in error.problems]
        return
    assert not any(isinstance(r, Refused) and r.refuses(value) for r in rows), f"{field}={value!r} validated"
    flags = [r for r in rows if isinstance(r, Flag)]
    if not flags:
        assert all(isinstance(r, Deployctl) and r.why for r in rows)  # deployctl's own (family): no server sees it
        return
    for argv, keys in rendered(spec):
        assert any(found(row, value, argv, keys) for row in flags), (
            f"{flavour.title}: {field}={value!r} validated but is not in {argv} / {keys}")


def test_a_field_without_a_row_fails_the_table_check(monkeypatch):
    """The check itself: a schema field that no table names is caught (here: a made-up one)."""
    for flavour in FLAVOURS.values():
        assert not rows_for(flavour.table, "max_lora_rank")
    assert "max_lora_rank" not in SAMPLES


def test_every_flavour_names_every_schema_field():
    for flavour in FLAVOURS.values():
        fields = MODEL_FIELDS + (GROUP_FIELDS if flavour.dp_groups else ())
        missing = [f for f in fields if not rows_for(flavour.table, f)]
        assert missing == [], f"{flavour.title}: no row for {missing}"
