"""The weights' state files a sync wrote may have been damaged since: the manifest (read by the controller through
the host's state query, and by the fetcher on the host) and a file's part state (read by the fetcher). A damaged
one is rebuilt: the controller says what was wrong in the plan, the files it vouched for are fetched again, and
nothing tracebacks (issue 39 item 6)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from deployctl.facts.model import HostFacts
from deployctl.facts.weights_state import STATE_SCRIPT, parse_manifest_state, parse_weights_state
from deployctl.plan.weights_stage import Listing, plan_weights, weights_hosts
from deployctl.spec.load import load_spec
from deployctl.weights import weights_fetch
from deployctl.weights.manifest import MANIFEST_NAME, SourceObject
from deployctl.weights.source import parse_source

SOUND = {"version": 1, "source": "s3://models/m/", "files": {
    "a": {"key": "m/a", "size": 10, "etag": "e1", "sha256": "0" * 64},
    "b": {"key": "m/b", "size": 20, "etag": "e2", "sha256": "1" * 64}}}
TEXT = json.dumps(SOUND)


def _entry(**change) -> str:
    doc = json.loads(TEXT)
    doc["files"]["a"].update(change)
    return json.dumps(doc)


DAMAGE = {  # manifest text -> what the plan says
    "not-json": ("files: {}", "is not JSON"),
    "truncated": (TEXT[: len(TEXT) // 2], "is not JSON"),
    "not-an-object": ("[1, 2]", "is not a JSON object"),
    "files-not-an-object": (json.dumps({"files": ["a", "b"]}), "files is not an object"),
    "entry-not-an-object": (json.dumps({"files": {"a": "x", "b": SOUND["files"]["b"]}}), "'a': not an object"),
    "string-size": (_entry(size="10"), "'a': size 10 is not a whole number of bytes"),
    "nan-size": (_entry(size=0.5).replace("0.5", "NaN"), "'a': size nan is not a whole number"),
    "infinite-size": (_entry(size=0.5).replace("0.5", "1e999"), "'a': size inf is not a whole number"),
    "huge-size": (_entry(size=10 ** 30), "'a': size 1000000000000000000000000000000 is not a whole number"),
    "negative-size": (_entry(size=-10), "'a': size -10 is not a whole number"),
    "boolean-size": (_entry(size=True), "'a': size True is not a whole number"),
    "etag-not-text": (_entry(etag=["e1"]), "'a': etag is not text"),
}
OBJECTS = (SourceObject("m/a", "a", 10, "e1"), SourceObject("m/b", "b", 20, "e2"))


def _host_state(dest: Path, manifest: str):
    """The host's state query as `up` runs it (python3 on the host; here this machine)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "a").write_bytes(b"x" * 10)
    (dest / "b").write_bytes(b"y" * 20)
    (dest / MANIFEST_NAME).write_text(manifest)
    out = subprocess.run([sys.executable, "-c", STATE_SCRIPT, str(dest), MANIFEST_NAME, str(dest / "fetcher")],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return parse_weights_state(out)


def _plan(state):
    spec = load_spec(Path(__file__).parents[1] / "fixtures" / "specs" / "examples" / "pd-2hosts.yaml")
    facts = {host: HostFacts(weights=state) for host in weights_hosts(spec)}
    return plan_weights(spec, facts, Listing(parse_source(spec.weights.source), OBJECTS), "digest")


def test_a_sound_manifest_vouches_for_its_files(tmp_path):
    state = _host_state(tmp_path / "w", TEXT)
    assert state.damaged == "" and set(state.manifest) == {"a", "b"}
    assert {step.action for step in _plan(state).steps} == {"keep"}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_manifest_is_said_and_its_files_fetched_again(damage, tmp_path):
    text, said = DAMAGE[damage]
    for state in (_host_state(tmp_path / "w", text), parse_manifest_state(text)):
        assert said in state.damaged and MANIFEST_NAME in state.damaged
        assert "a" not in state.manifest  # it vouches for nothing it cannot
    steps = _plan(_host_state(tmp_path / "w", text)).steps
    assert steps and all(s.action == "fetch" and "a" in {o.path for o in s.actions[0].objects} for s in steps)
    assert all(said in s.reason and "fetched again and the manifest rewritten" in s.reason for s in steps)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_the_fetcher_rebuilds_a_damaged_manifest(damage, tmp_path):
    (tmp_path / MANIFEST_NAME).write_text(DAMAGE[damage][0])
    manifest = weights_fetch.Manifest(str(tmp_path), "s3://models/m/")
    assert "a" not in manifest.doc["files"]
    manifest.record({"path": "a", "key": "m/a", "size": 10, "etag": "e1"}, "2" * 64)
    manifest.save(durable=True)
    assert json.loads((tmp_path / MANIFEST_NAME).read_text())["files"]["a"]["sha256"] == "2" * 64


PART_STATE = {"etag": "e1", "size": 300, "done": [0], "written": [100, 0, 0], "sha": {"0": "3" * 64}}
PART_DAMAGE = {
    "not-json": "{",
    "not-an-object": "[0]",
    "done-not-a-list": json.dumps({**PART_STATE, "done": 5}),
    "done-out-of-range": json.dumps({**PART_STATE, "done": [7]}),
    "done-strings": json.dumps({**PART_STATE, "done": ["0"]}),
    "written-nan": json.dumps({**PART_STATE, "written": [float("nan"), 0, 0]}),
    "written-infinite": json.dumps({**PART_STATE, "written": [float("inf"), 0, 0]}),
    "sha-not-text": json.dumps({**PART_STATE, "sha": {"0": 5}}),
}


@pytest.mark.parametrize("damage", list(PART_DAMAGE))
def test_a_damaged_part_state_starts_the_file_over(damage, tmp_path):
    job = weights_fetch.FileJob(str(tmp_path), {"path": "a", "key": "m/a", "size": 300, "etag": "e1"}, 100)
    Path(job.partial).write_bytes(b"z" * 100)
    Path(job.state_path).write_text(PART_DAMAGE[damage])
    job.open()
    try:
        assert job.written == [0, 0, 0] and job.part_sha == {} and not any(job.done)
    finally:
        import os

        os.close(job.fd)
