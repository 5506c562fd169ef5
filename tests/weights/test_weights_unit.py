"""Pure parts of weights sync: source parsing, per-host plan, digest, job, progress lines."""

from __future__ import annotations

import pytest

from deployctl.errors import UsageError
from deployctl.weights.manifest import HostState, SourceObject, manifest_digest, plan_host
from deployctl.weights.progress import parse_progress
from deployctl.weights.source import Source, addressing_style, parse_source, region_of, relative_path
from deployctl.execute.weights import build_job
from deployctl.plan.actions import Fetch


def test_parse_source_forms():
    assert parse_source("s3://models/llama/") == Source("s3", "s3://models/llama/", bucket="models", prefix="llama/")
    assert parse_source("obs://b/m") == Source("s3", "obs://b/m", bucket="b", prefix="m/")
    assert parse_source("s3://b") == Source("s3", "s3://b", bucket="b", prefix="")
    assert parse_source("/data/m") == Source("local", "/data/m", path="/data/m")
    with pytest.raises(UsageError):
        parse_source("http://x/y")


def test_addressing_and_region():
    assert addressing_style("http://10.200.0.1:8333") == "path"
    assert addressing_style("https://obs.cn-southwest-2.myhuaweicloud.com") == "virtual"
    assert region_of("https://obs.cn-southwest-2.myhuaweicloud.com", None) == "cn-southwest-2"
    assert region_of("http://10.200.0.1:8333", None) == "us-east-1"
    assert region_of("http://x", "eu-west-1") == "eu-west-1"


def test_relative_path_skips_markers_and_unsafe_names():
    assert relative_path("m/a/b.json", "m/") == "a/b.json"
    assert relative_path("m/dir/", "m/") is None
    assert relative_path("m/../etc/passwd", "m/") is None
    assert relative_path("other/x", "m/") is None


OBJ_A = SourceObject("m/a", "a", 10, "e1")
OBJ_B = SourceObject("m/d/b", "d/b", 20, "e2-2")


def test_plan_skips_what_the_manifest_vouches_for_and_counts_partials():
    manifest = {"a": {"size": 10, "etag": "e1", "sha256": "x"}, "gone": {"size": 1, "etag": "z", "sha256": "y"}}
    state = HostState(manifest, {"a": 10, "d/b.deployctl-partial": 8}, free_bytes=100, free_path="/srv")
    plan = plan_host((OBJ_A, OBJ_B), state)
    assert plan.fetch == (OBJ_B,) and plan.remove == ("gone",) and plan.bytes_needed == 12


def test_plan_refetches_a_changed_etag_or_a_missing_file():
    manifest = {"a": {"size": 10, "etag": "old", "sha256": "x"}, "d/b": {"size": 20, "etag": "e2-2", "sha256": "y"}}
    plan = plan_host((OBJ_A, OBJ_B), HostState(manifest, {"a": 10}, 0, "/"))
    assert plan.fetch == (OBJ_A, OBJ_B) and plan.bytes_needed == 30


def test_digest_is_order_free_and_none_when_empty():
    one = {"a": {"size": 1, "sha256": "aa", "etag": "1"}, "b": {"size": 2, "sha256": "bb", "etag": "2"}}
    two = dict(reversed(list(one.items())))
    assert manifest_digest(one) == manifest_digest(two)
    assert manifest_digest(one).startswith("sha256:")
    assert manifest_digest({**one, "b": {"size": 2, "sha256": "cc"}}) != manifest_digest(one)
    assert manifest_digest({}) is None


def test_job_carries_urls_only_for_fetched_files():
    state = HostState({}, {}, 10**9, "/")
    plan = plan_host((OBJ_A,), state)
    fetch = Fetch("s3://b/m/", "/w", plan.fetch, plan.remove, plan.bytes_needed, listed="")
    job = build_job(fetch, {"m/a": "http://s/m/a?sig"})
    assert job["files"] == [{"key": "m/a", "path": "a", "size": 10, "etag": "e1", "url": "http://s/m/a?sig"}]
    assert job["dest"] == "/w" and set(job) == {"dest", "source", "part_size", "concurrency", "remove", "files"}


def test_progress_line():
    assert parse_progress("P 5 10") == (5, 10)
    assert parse_progress("Traceback") is None


def _stage(spec_name: str, held: dict[str, dict] | None = None, fan_out: bool = True, peer_wait: int = 60):
    from dataclasses import replace
    from pathlib import Path

    from deployctl.facts.model import HostFacts
    from deployctl.plan.weights_stage import Listing, plan_weights, weights_hosts
    from deployctl.spec.load import load_spec
    from deployctl.weights.source import parse_source

    spec = load_spec(Path(__file__).parents[1] / "fixtures" / "specs" / "examples" / spec_name)
    spec = replace(spec, weights=replace(spec.weights, fan_out=fan_out, peer_wait=peer_wait))
    objects = (SourceObject("m/a", "a", 10, "e1"), SourceObject("m/b", "b", 20, "e2"))
    facts = {host: HostFacts(weights=HostState((held or {}).get(host, {}), {p: e["size"] for p, e in
                                                                          (held or {}).get(host, {}).items()},
                                               1 << 40, "/mnt"))
             for host in weights_hosts(spec)}
    return plan_weights(spec, facts, Listing(parse_source(spec.weights.source), objects), "digest")


def test_hosts_fetching_from_a_store_share_the_parts_each_file_among_the_hosts_that_need_it():
    held = {"node2": {"a": {"key": "m/a", "size": 10, "etag": "e1", "sha256": "x"}}}
    stage = _stage("pd-2hosts.yaml", held)
    fetches = {step.host: step.actions[0] for step in stage.steps}
    assert fetches["node1"].peers == fetches["node2"].peers == (("node1", "192.0.2.21"), ("node2", "192.0.2.22"))
    assert fetches["node1"].holders == {"a": ("node1",), "b": ("node1", "node2")}
    assert fetches["node2"].holders == {"b": ("node1", "node2")}
    assert "shared with 1 peer host(s)" in fetches["node1"].display()
    job = build_job(fetches["node2"], {"m/b": "http://s/m/b?sig"}, host="node2", token="tok")
    assert job["swarm"] == {"token": "tok", "me": "node2", "peer_concurrency": 4, "peer_wait": 60,
                            "peers": {"node1": ["192.0.2.21", 29471], "node2": ["192.0.2.22", 29471]}}
    assert job["files"][0]["holders"] == ["node1", "node2"]
    # Without the executor's token (or alone) the job is the plain one: every part from the store.
    assert "swarm" not in build_job(fetches["node2"], {"m/b": "u"}) and "holders" not in build_job(
        fetches["node2"], {"m/b": "u"})["files"][0]


def test_one_host_fetching_alone_reads_everything_from_the_store():
    held = {"node2": {"a": {"key": "m/a", "size": 10, "etag": "e1", "sha256": "x"},
                      "b": {"key": "m/b", "size": 20, "etag": "e2", "sha256": "y"}}}
    stage = _stage("pd-2hosts.yaml", held)
    fetching = [a for s in stage.steps for a in s.actions]
    assert len(fetching) == 1 and fetching[0].peers == () and fetching[0].holders == {}
    assert [a for s in _stage("pd-1host.yaml").steps for a in s.actions][0].peers == ()


def test_fan_out_false_has_every_host_read_the_whole_model_from_the_store():
    stage = _stage("pd-2hosts.yaml", fan_out=False)
    fetching = [a for s in stage.steps for a in s.actions]
    assert len(fetching) == 2 and all(f.peers == () and f.holders == {} for f in fetching)
    assert not any("peer host" in f.display() for f in fetching)
    assert "swarm" not in build_job(fetching[0], {"m/a": "u", "m/b": "u"}, host="node1", token="tok")


def test_fan_out_is_a_boolean_at_its_path():
    from pathlib import Path

    from deployctl.errors import SpecError
    from deployctl.spec.load import load_spec_text

    text = (Path(__file__).parents[1] / "fixtures" / "specs" / "examples" / "pd-2hosts.yaml").read_text()
    assert "weights:" in text
    off = load_spec_text(text.replace("weights:", "weights:\n  fan_out: false", 1))
    assert off.weights.fan_out is False
    with pytest.raises(SpecError) as caught:
        load_spec_text(text.replace("weights:", "weights:\n  fan_out: sometimes", 1))
    assert [(p.path, p.line) for p in caught.value.problems] == [(("weights", "fan_out"), 11)], caught.value.lines()


def test_peer_wait_is_seconds_within_its_bounds_at_its_path_and_reaches_the_swarm():
    from pathlib import Path

    from deployctl.errors import SpecError
    from deployctl.spec.load import load_spec_text

    text = (Path(__file__).parents[1] / "fixtures" / "specs" / "examples" / "pd-2hosts.yaml").read_text()
    assert load_spec_text(text).weights.peer_wait == 60
    for value in (5, 3600):
        assert load_spec_text(text.replace("weights:", f"weights:\n  peer_wait: {value}", 1)).weights.peer_wait == value
    for value in (4, 3601, "'10s'", 2.5):
        with pytest.raises(SpecError) as caught:
            load_spec_text(text.replace("weights:", f"weights:\n  peer_wait: {value}", 1))
        assert [(p.path, p.line) for p in caught.value.problems] == [(("weights", "peer_wait"), 11)], value
    stage = _stage("pd-2hosts.yaml", peer_wait=7)
    fetch = stage.steps[0].actions[0]
    job = build_job(fetch, {o.key: "u" for o in fetch.objects}, host=stage.steps[0].host, token="tok")
    assert job["swarm"]["peer_wait"] == 7
