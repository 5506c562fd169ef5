"""The weights stage run for real through the local transport: a local directory as the source, planned from
gathered facts, pushed into dest with its manifest; planned again, nothing is left to do."""

import hashlib
import json
import shutil
import textwrap

import pytest

from deployctl.execute import Executor
from deployctl.gather import gather_state
from deployctl.plan.up import UpInputs, plan_up
from deployctl.plan.weights_stage import Listing
from deployctl.spec.load import load_spec_text
from deployctl.transport.local import LocalTransport
from deployctl.weights.source import parse_source
from deployctl.weights.store import list_local

pytestmark = pytest.mark.skipif(shutil.which("python3") is None, reason="the weights state probe runs python3")
WEIGHTS = frozenset({"weights"})


def spec_for(tmp_path):
    return load_spec_text(textwrap.dedent(f"""\
        version: 1
        name: w
        platform: gpu
        hosts:
          here: {{address: local}}
        image: {{name: img:1}}
        weights: {{source: {tmp_path / "src"}, dest: {tmp_path / "dest"}}}
        model: {{served_name: m, max_model_len: 2048, max_num_batched_tokens: 2048}}
        topology:
          mode: mixed
          instances:
            - {{host: here, devices: [0], port: 8000}}
        """))


def plan_for(spec, transports):
    source = parse_source(spec.weights.source)
    listing = Listing(source, list_local(source), "2026-11-24T00:00:00Z")
    facts = gather_state(spec, transports, stages=WEIGHTS)
    return plan_up(spec, facts, UpInputs(listing=listing), stages=WEIGHTS)


def test_push_then_nothing_to_do_and_a_removed_file_leaves_dest(tmp_path):
    (tmp_path / "src" / "sub").mkdir(parents=True)
    files = {"config.json": b'{"a": 1}', "sub/model.bin": b"x" * 5000}
    for name, data in files.items():
        (tmp_path / "src" / name).write_bytes(data)
    spec = spec_for(tmp_path)
    transports = {"here": LocalTransport("here")}

    plan = plan_for(spec, transports)
    (step,) = plan.steps
    assert step.action == "fetch" and step.actions[0].bytes == 5008
    report = Executor(transports).execute(plan)
    assert not report.failed and report.outcomes[0].transferred == 5008
    for name, data in files.items():
        assert (tmp_path / "dest" / name).read_bytes() == data
    manifest = json.loads((tmp_path / "dest" / ".deployctl-manifest.json").read_text())
    assert {p: e["sha256"] for p, e in manifest["files"].items()} == {
        p: hashlib.sha256(d).hexdigest() for p, d in files.items()}

    again = plan_for(spec, transports)
    assert not again.changed and [s.action for s in again.steps] == ["keep"]

    (tmp_path / "src" / "config.json").unlink()
    (tmp_path / "dest" / "mine.txt").write_text("the user's own file")
    removal = plan_for(spec, transports)
    assert removal.steps[0].actions[0].remove == ("config.json",)
    assert not Executor(transports).execute(removal).failed
    assert not (tmp_path / "dest" / "config.json").exists()
    assert (tmp_path / "dest" / "mine.txt").exists()  # only what deployctl's manifest lists is removed
