"""A restarted front's list brought to the spec's (execute/drain.py sync_list): read, the difference taken out and
put in by the kind's own calls, then awaited until listed."""

from __future__ import annotations

import json
import threading

import pytest

from deployctl.core import Command
from deployctl.errors import HostError
from deployctl.execute.drain import sync_list
from deployctl.fronts.base import Backend
from deployctl.plan.actions import SyncList
from deployctl.transport import Result
from tests.fakes.transport import FakeTransport

LIST = Command(("curl", "--silent", "http://127.0.0.1:8600/list_workers"))
WANTED = tuple(Backend("mixed", f"scale-mixed-{i}", "10.0.0.1", 8601 + i) for i in range(3))


class Router:
    """vllm-router's list as its worker API changes it (fronts/router.py: /add_worker, /remove_worker)."""

    def __init__(self, urls) -> None:
        self.urls = list(urls)

    def answer(self, command: Command) -> Result:
        url = command.argv[-1]
        if url.endswith("/list_workers"):
            return Result(command.argv, 0, json.dumps({"urls": self.urls}), "")
        worker = url.split("url=", 1)[1].replace("%3A", ":").replace("%2F", "/")
        if "/add_worker" in url:
            self.urls.append(worker)
        else:
            self.urls.remove(worker)
        return Result(command.argv, 0, "", "")


def test_what_its_argv_listed_and_the_spec_lacks_goes_out_and_what_the_spec_has_comes_in():
    router = Router(["http://10.0.0.1:8601", "http://10.0.0.1:8609"])  # the first `up`'s list, one gone since
    fake = FakeTransport("gpu1", {"127.0.0.1:8600": router.answer})
    sync_list(fake, SyncList("vllm-router", 8600, LIST, WANTED, 5.0), poll_interval=0.01, cancel=threading.Event(),
              on_progress=lambda line: None)
    assert sorted(router.urls) == ["http://10.0.0.1:8601", "http://10.0.0.1:8602", "http://10.0.0.1:8603"]
    calls = [c.argv[-1] for c in fake.ran if "?url=" in c.argv[-1]]
    assert [c.split("?")[0] for c in calls] == ["http://127.0.0.1:8600/remove_worker"] + [
        "http://127.0.0.1:8600/add_worker"] * 2


def test_a_front_that_does_not_answer_its_list_is_a_host_error():
    fake = FakeTransport("gpu1", {"list_workers": Result(LIST.argv, 7, "", "connection refused")})
    with pytest.raises(HostError, match="did not answer its list"):
        sync_list(fake, SyncList("vllm-router", 8600, Command(LIST.argv, check=False), WANTED, 5.0),
                  poll_interval=0.01, cancel=threading.Event(), on_progress=lambda line: None)
