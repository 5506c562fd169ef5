"""The image stages as plan data: pull where missing, or build / ship / keep by the inputs label, with bytes."""

import textwrap

import pytest

from deployctl.errors import UsageError
from deployctl.facts.deployed import DeployedState
from deployctl.facts.image_state import HostImage
from deployctl.facts.model import HostFacts
from deployctl.image.inputs import BuildInputs
from deployctl.image.package import Package
from deployctl.plan.actions import Build, Ship
from deployctl.plan.up import UpInputs, plan_up
from deployctl.spec.load import load_spec_text

SPEC = textwrap.dedent("""\
    version: 1
    name: img
    platform: gpu
    hosts:
      a: {address: 192.0.2.1}
      b: {address: 192.0.2.2}
      c: {address: 192.0.2.3}
    image:
      name: deployctl/vllm:1
      build: {base: "base:1", packages: /pkg/AscendCloud-6.3.909-x.zip, where: WHERE}
    weights: {dest: /w}
    model: {served_name: m, max_model_len: 2048, max_num_batched_tokens: 2048}
    topology:
      mode: mixed
      instances:
        - {host: a, devices: [0], port: 8000}
        - {host: b, devices: [0], port: 8000}
        - {host: c, devices: [0], port: 8000}
    """)
PACKAGE = Package("6.3.909", "llm.zip", "opp.zip", "l" * 64, "o" * 64, {"Dockerfile": b"FROM x\n"}, b"L", b"O")
INPUTS = BuildInputs(PACKAGE, {"Dockerfile": b"FROM x\n", "llm.zip": b"L", "opp.zip": b"O"})


def spec(where="once"):
    return load_spec_text(SPEC.replace("WHERE", where))


def facts(**images) -> dict:
    return {h: HostFacts(deployed=DeployedState(image_id=images[h].image_id if h in images else None),
                         image=images.get(h, HostImage(base_id="sha256:base")))
            for h in ("a", "b", "c")}


def steps(plan, stage):
    return [s for st in plan.stages if st.name == stage for s in st.steps]


def test_build_once_then_ship_to_the_others_with_the_bytes_each_receives():
    plan = plan_up(spec(), facts(), UpInputs(build=INPUTS), stages=frozenset({"image"}))
    (build_step,) = steps(plan, "image")
    (build,) = build_step.actions
    assert isinstance(build, Build) and build_step.host == "a" and build.inputs == INPUTS.digest("sha256:base")
    assert build.bytes == len(build.context) > 0
    (ship_step,) = steps(plan, "ship")
    (ship,) = ship_step.actions
    assert isinstance(ship, Ship) and ship_step.host == "a" and ship.targets == ("b", "c") and ship.size is None
    doc = plan.to_json()
    assert {m["host"]: m["image_bytes"] for m in doc["moves"]} == {"a": build.bytes, "b": None, "c": None}
    assert [e["type"] for e in doc["steps"] if "type" in e] == ["build", "ship"]


def test_a_built_image_on_the_builder_ships_with_its_size_and_matching_hosts_keep():
    wanted = INPUTS.digest("sha256:base")
    built = HostImage("sha256:i", wanted, "sha256:base", size=4096)
    plan = plan_up(spec(), facts(a=built, c=built), UpInputs(build=INPUTS), stages=frozenset({"image"}))
    assert [(s.host, s.action) for s in steps(plan, "image")] == [("a", "keep"), ("c", "keep")]
    (ship_step,) = steps(plan, "ship")
    assert ship_step.actions == (Ship("deployctl/vllm:1", ("b",), 4096),)
    assert plan.moves() == [{"host": "b", "image_bytes": 4096, "weight_bytes": 0}]


def test_everything_in_place_is_nothing_to_do():
    wanted = INPUTS.digest("sha256:base")
    built = HostImage("sha256:i", wanted, "sha256:base", size=1)
    plan = plan_up(spec("each-host"), facts(a=built, b=built, c=built), UpInputs(build=INPUTS),
                   stages=frozenset({"image"}))
    assert not plan.changed and plan.moves() == []
    assert plan.stages[-1].summary == "image: up to date everywhere"


def test_a_missing_base_builds_after_pulling_it_and_containers_wait_for_the_image():
    plan = plan_up(spec("each-host"), {**facts(), "b": HostFacts(deployed=DeployedState(), image=HostImage())},
                   UpInputs(build=INPUTS))
    builds = {s.host: s.actions[0] for s in steps(plan, "image")}
    assert builds["b"].pull_base and builds["b"].inputs is None and "docker pull base:1" in builds["b"].display()
    assert plan.pending == ("b",)  # its containers are planned again once the image exists


def test_containers_are_keyed_by_the_inputs_label_so_a_rebuilt_identical_image_keeps_them():
    wanted = INPUTS.digest("sha256:base")
    built = HostImage("sha256:i", wanted, "sha256:base", size=1)
    first = plan_up(spec("each-host"), facts(a=built, b=built, c=built), UpInputs(build=INPUTS))
    digests = {s.container: s.commands[0].argv for s in steps(first, "workers")}
    rebuilt = HostImage("sha256:other-id", wanted, "sha256:base", size=1)
    second = plan_up(spec("each-host"), facts(a=rebuilt, b=rebuilt, c=rebuilt), UpInputs(build=INPUTS))
    assert {s.container: s.commands[0].argv for s in steps(second, "workers")} == digests


def test_without_a_build_a_missing_image_is_pulled_and_a_present_one_kept():
    text = "\n".join(line for line in SPEC.splitlines() if "build:" not in line)
    s = load_spec_text(text)
    f = {h: HostFacts(deployed=DeployedState(image_id="sha256:i" if h == "a" else None)) for h in "abc"}
    plan = plan_up(s, f, stages=frozenset({"image"}))
    assert [(st.host, st.action) for st in steps(plan, "image")] == [("a", "keep"), ("b", "run"), ("c", "run")]
    assert steps(plan, "image")[1].commands[0].argv == ("docker", "pull", "deployctl/vllm:1")


def test_the_package_must_match_each_hosts_npu_driver():
    ascend = SPEC.replace("platform: gpu\n", "")
    s = load_spec_text(ascend.replace("WHERE", "once"))
    f = facts(a=HostImage(base_id="sha256:base", driver="24.1.rc2"))
    with pytest.raises(UsageError, match="driver 24.1.rc2 does not match AscendCloud 6.3.909"):
        plan_up(s, f, UpInputs(build=INPUTS), stages=frozenset({"image"}))
