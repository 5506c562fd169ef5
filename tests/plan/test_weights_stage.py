"""The weights stage as plan data: per host the files and bytes to fetch, or nothing; without credentials the
hosts' manifests decide."""

import textwrap

import pytest

from deployctl.errors import HostError
from deployctl.facts.model import HostFacts
from deployctl.plan.actions import Fetch
from deployctl.plan.up import UpInputs, plan_up
from deployctl.plan.weights_stage import Listing, held_without_listing
from deployctl.spec.load import load_spec_text
from deployctl.weights.manifest import HostState, SourceObject
from deployctl.weights.source import parse_source
from deployctl.weights.store import MissingCredentials

SPEC = textwrap.dedent("""\
    version: 1
    name: w
    platform: gpu
    hosts:
      a: {address: 192.0.2.1}
      b: {address: 192.0.2.2}
    image: {name: img:1}
    weights: {source: s3://models/tiny/, dest: /srv/w}
    model: {served_name: m, max_model_len: 2048, max_num_batched_tokens: 2048}
    topology:
      mode: mixed
      instances:
        - {host: a, devices: [0], port: 8000}
        - {host: b, devices: [0], port: 8000}
    """)
OBJECTS = (SourceObject("tiny/config.json", "config.json", 100, "e1"),
           SourceObject("tiny/model.bin", "model.bin", 5000, "e2"))
HELD = {"config.json": {"size": 100, "etag": "e1", "sha256": "c"}, "model.bin": {"size": 5000, "etag": "e2",
                                                                                "sha256": "m"}}
WEIGHTS = frozenset({"weights"})


def state(manifest=None, sizes=None, free=10**9, source="s3://models/tiny/", partial=0) -> HostState:
    sizes = dict(sizes or {})
    if partial:
        sizes["model.bin.deployctl-partial"] = partial
    return HostState(manifest or {}, sizes, free, "/srv", fetcher_digest="f1", source=source, listed="T0")


def listing(**kw):
    return Listing(parse_source("s3://models/tiny/"), **{"objects": OBJECTS, "listed": "T1", **kw})


def plan(states, lst=None, fetcher="f1"):
    facts = {h: HostFacts(weights=s) for h, s in states.items()}
    return plan_up(load_spec_text(SPEC), facts, UpInputs(listing=lst or listing(), fetcher_digest=fetcher),
                   stages=WEIGHTS)


def test_an_empty_host_fetches_everything_and_a_synced_one_keeps():
    synced = state(HELD, {"config.json": 100, "model.bin": 5000})
    p = plan({"a": state(), "b": synced})
    a, b = p.steps
    assert (a.action, b.action) == ("fetch", "keep")
    (fetch,) = a.actions
    assert isinstance(fetch, Fetch) and fetch.objects == OBJECTS and fetch.bytes == 5100 and not fetch.send_fetcher
    assert p.moves() == [{"host": "a", "image_bytes": 0, "weight_bytes": 5100}]
    entry = next(e for e in p.to_json()["steps"] if e.get("type") == "fetch")
    assert (entry["host"], entry["files"], entry["bytes"], entry["dest"]) == ("a", 2, 5100, "/srv/w")
    assert p.stages[0].summary_after(5100) == "weights: 2 host(s) hold 2 files, 5100 bytes transferred"


def test_partial_bytes_are_not_counted_again_and_a_new_fetcher_is_sent():
    p = plan({"a": state(partial=3000), "b": state()}, fetcher="f2")
    fetches = {s.host: s.actions[0] for s in p.steps}
    assert fetches["a"].bytes == 2100 and fetches["b"].bytes == 5100
    assert fetches["a"].send_fetcher and fetches["b"].send_fetcher


def test_a_host_without_room_is_refused_before_anything_moves():
    with pytest.raises(HostError, match=r"b \(192.0.2.2\): not enough space for the weights at /srv/w: 5100 bytes"):
        plan({"a": state(), "b": state(free=10)})


def test_without_credentials_identical_complete_manifests_vouch_for_the_weights():
    synced = state(HELD, {"config.json": 100, "model.bin": 5000})
    p = plan({"a": synced, "b": synced}, listing(objects=(), unlisted=MissingCredentials("no credentials")))
    assert [s.action for s in p.steps] == ["keep", "keep"] and not p.changed
    assert "every host holds the manifest of s3://models/tiny/ (listed T0); source not listed" in p.steps[0].reason


def test_without_credentials_a_host_missing_a_file_is_the_credentials_error_with_a_way_around():
    synced = state(HELD, {"config.json": 100, "model.bin": 5000})
    short = state(HELD, {"config.json": 100})
    with pytest.raises(MissingCredentials) as caught:
        plan({"a": synced, "b": short}, listing(objects=(), unlisted=MissingCredentials("no credentials")))
    assert "--skip weights" in caught.value.hint
    assert held_without_listing("s3://models/tiny/", {"a": synced, "b": short}) is None
    assert held_without_listing("s3://other/", {"a": synced}) is None
