"""plan/units.py: one definition of what goes out, is replaced or restarts together, for `up`'s rollout waves and
`deployctl watch`'s restarts: a vllm-ascend DP group whole (every rank, every host), else an instance alone."""

from __future__ import annotations

from deployctl.plan.rollout import front_steps
from deployctl.plan.units import serving_units, unit_of
from deployctl.plan.watch import Verdict, restarts
from deployctl.spec.load import load_spec_text
from tests.plan.test_image_stage import SPEC as GPU_MIXED
from tests.spec.test_upstream_build import QWEN3


def test_a_dp_group_is_one_unit_keyed_by_its_label_for_the_rollout_and_for_watch():
    spec = load_spec_text(QWEN3 % "external")
    units = serving_units(spec)
    assert list(units) == ["prefill0", "decode0"]
    rank = next(i for i in spec.instances if i.name.endswith("decode0-r3"))
    key, members = unit_of(spec, rank)
    assert key == "decode0" and members == units["decode0"] and len(members) == 8
    (restart,) = restarts(spec, [Verdict(rank.name, rank.host, "stalled", "flat")])
    assert restart.unit == key and restart.instances == members


def test_anything_else_is_its_own_unit_and_the_front_is_no_serving_unit():
    spec = load_spec_text(GPU_MIXED.replace("WHERE", "once"))
    units = serving_units(spec)
    assert all(members == (next(i for i in spec.instances if i.name == key),) for key, members in units.items())
    assert not any(i.role in ("router", "proxy", "scheduler") for m in units.values() for i in m)


def test_the_front_seam_takes_out_every_rank_of_the_group_of_the_container_named():
    from deployctl.plan.front import reach

    spec = load_spec_text(QWEN3 % "external")
    out, _ = front_steps(spec, ("qwen3-decode0-r5",), reach(spec))
    assert {name for name, _ in out.actions[0].servers} == {i.name for i in serving_units(spec)["decode0"]}
