"""`status`'s weights line: one host is synced or not, never "differing"; hosts differ only when two hold digests."""

from __future__ import annotations

from deployctl.commands.status import weights_line

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


def test_one_host_synced_says_synced_on_that_host():
    assert weights_line({"identical": True, "hosts": {"tb1": A}}) == f"weights: synced on tb1 ({A[:19]})"


def test_one_host_without_manifest_is_not_synced_and_does_not_differ():
    line = weights_line({"identical": False, "hosts": {"tb1": None}})
    assert "not synced on tb1" in line and "differ" not in line and "weights sync" in line


def test_several_hosts_identical():
    assert weights_line({"identical": True, "hosts": {"tb1": A, "tb2": A}}) == \
        f"weights: identical on every host ({A[:19]})"


def test_one_of_two_hosts_missing_is_named_without_differ():
    line = weights_line({"identical": False, "hosts": {"tb1": A, "tb2": None}})
    assert "not synced on tb2" in line and "tb1" not in line and "differ" not in line


def test_two_digests_differ_and_a_third_host_missing():
    line = weights_line({"identical": False, "hosts": {"tb1": A, "tb2": B, "tb3": None}})
    assert "not synced on tb3" in line
    assert f"weights differ between hosts — tb1: {A[:19]}, tb2: {B[:19]}" in line
