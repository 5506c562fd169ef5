"""Per-host decisions, the input hash and the compatibility check, from plain data."""

from __future__ import annotations

import io
import tarfile

import pytest

from deployctl.errors import UsageError
from deployctl.facts.compat import CompatRow
from deployctl.image.inputs import context_tar, inputs_digest
from deployctl.facts.image_state import HostImage
from deployctl.image.plan import HostAction, check_compat, plan_image_build


def digest(base_id):
    return f"sha256:in-{base_id}"


def test_each_host_builds_where_missing_or_changed_and_skips_where_the_label_matches():
    facts = {
        "a": HostImage(image_id="sha256:i1", inputs="sha256:in-B", base_id="B"),
        "b": HostImage(image_id=None, base_id="B"),
        "c": HostImage(image_id="sha256:i2", inputs="sha256:old", base_id="B"),
        "d": HostImage(image_id="sha256:i3", base_id="B"),
        "e": HostImage(),
    }
    assert plan_image_build(list(facts), "each-host", facts, digest) == (
        HostAction("a", "skip", "image has in-B already", "sha256:in-B"),
        HostAction("b", "build", "image missing", "sha256:in-B"),
        HostAction("c", "build", "inputs changed: old -> in-B", "sha256:in-B"),
        HostAction("d", "build", "image was not built by deployctl (no inputs label)", "sha256:in-B"),
        HostAction("e", "build", "base image missing: pull it, then build", None),
    )


def test_once_builds_on_the_first_host_and_ships_to_the_others_that_lack_it():
    facts = {"a": HostImage(base_id="B"), "b": HostImage(), "c": HostImage(image_id="x", inputs="sha256:in-B")}
    assert plan_image_build(["a", "b", "c"], "once", facts, digest) == (
        HostAction("a", "build", "image missing", "sha256:in-B"),
        HostAction("b", "ship", "image missing: ship from a", "sha256:in-B", "a"),
        HostAction("c", "skip", "image has in-B already", "sha256:in-B"),
    )


def test_inputs_digest_changes_with_each_input_and_not_with_order():
    base = inputs_digest("B", "L", "O", {"Dockerfile": b"x", "a": b"1"})
    assert base == inputs_digest("B", "L", "O", {"a": b"1", "Dockerfile": b"x"})
    changed = [inputs_digest("B2", "L", "O", {"Dockerfile": b"x", "a": b"1"}),
               inputs_digest("B", "L2", "O", {"Dockerfile": b"x", "a": b"1"}),
               inputs_digest("B", "L", "O2", {"Dockerfile": b"x", "a": b"1"}),
               inputs_digest("B", "L", "O", {"Dockerfile": b"x", "a": b"2"})]
    assert len({base, *changed}) == 5 and base.startswith("sha256:")


def test_context_tar_is_deterministic_and_holds_the_files():
    data = context_tar({"Dockerfile": b"FROM x\n", "run.sh": b"#!/bin/sh\n"})
    assert data == context_tar({"run.sh": b"#!/bin/sh\n", "Dockerfile": b"FROM x\n"})
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert [(m.name, m.mode, m.mtime) for m in tar.getmembers()] == [("Dockerfile", 0o644, 0), ("run.sh", 0o755, 0)]


ROWS = (CompatRow("6.3.909", "23.0.6", None, None, "8.0.rc3"), CompatRow("6.3.912", "24.1.0", None, None, "8.1"))


def test_compat_accepts_the_row_of_the_driver_and_hosts_without_a_driver():
    check_compat("6.3.909", {"a": "23.0.6", "gpu": None}, ROWS)


def test_compat_refuses_another_drivers_release_and_an_unknown_release():
    with pytest.raises(UsageError, match=r"b: NPU driver 24.1.0 does not match AscendCloud 6.3.909 \(it needs driver 23.0.6\)"):
        check_compat("6.3.909", {"a": "23.0.6", "b": "24.1.0"}, ROWS)
    with pytest.raises(UsageError, match="AscendCloud 6.3.999 is not in the compatibility table"):
        check_compat("6.3.999", {"a": "23.0.6"}, ROWS)
