"""A spec as TARGET: its public endpoint, served name and the facts each result records (nothing contacted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployctl.bench.client import BaseUrl, request_bytes
from deployctl.bench.target import resolve
from deployctl.errors import DeployctlError, ExitStatus

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


def test_disaggregated_spec_targets_the_scheduler():
    target = resolve(str(PLAYBOOKS / "demo-pd.yaml"))
    assert str(target.url) == "http://10.200.0.11:9000" and target.model == "demo-tiny"
    assert target.facts["deployment"] == "demo-pd" and len(target.facts["spec_digest"]) == 64
    assert [h["host"] for h in target.facts["hosts"]] == ["tb1", "tb2"]


def test_url_target_and_request_bytes():
    target = resolve("http://127.0.0.1:8080/prefix/")
    assert (target.url, target.model, target.facts) == (BaseUrl("http", "127.0.0.1", 8080, "/prefix"), None, {})
    data = request_bytes(target.url, "/v1/completions", {"model": "m"}, "r-1")
    assert data == (b"POST /prefix/v1/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
                    b"Content-Type: application/json\r\nAccept: text/event-stream\r\nX-Request-Id: r-1\r\n"
                    b"Content-Length: 13\r\n\r\n{\"model\":\"m\"}")
    with pytest.raises(DeployctlError) as refused:  # not a URL, so a spec path, and there is no such file
        resolve("ftp://host/")
    assert refused.value.exit_status == ExitStatus.SPEC
