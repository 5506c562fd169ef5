"""Every file `plan` writes on a host lies under /var/lib/deployctl/<name>/, whatever served_name the spec holds:
a name that could leave that directory is refused by the loader, before any plan exists."""

from __future__ import annotations

import posixpath

import pytest

from deployctl.errors import SpecError
from deployctl.plan.up import plan_up
from tests.plan.hostfacts import deployed
from deployctl.spec.load import load_spec_text
from tests.plan.test_triton import TRITON

HOSTILE = ["../../../../etc/cron.d", "..", ".", "a/../../x", "/etc", "-rf", "a\\..\\b", "\n", "x" * 129, "a b",
           ""]
PLAIN = ["opt-125m", "a..b", "model.v2_final-1", "x" * 128, "Qwen2.5-7B-Instruct"]


def spec_text(served_name: str, server: str) -> str:
    quoted = '"' + served_name.replace("\\", "\\\\").replace("\n", "\\n") + '"'
    return TRITON.replace("served_name: opt-125m", f"served_name: {quoted}").replace("server: triton",
                                                                                     f"server: {server}")


@pytest.mark.parametrize("server", ["triton", "vllm"])
@pytest.mark.parametrize("served_name", HOSTILE + PLAIN + ["org:name"], ids=repr)
def test_no_file_outside_the_deployments_directory(server, served_name):
    try:
        spec = load_spec_text(spec_text(served_name, server), environ={})
    except SpecError as error:
        assert [p.dotted_path for p in error.problems] == ["model.served_name"]
        assert served_name in HOSTILE or (server, served_name) == ("triton", "org:name")
        return
    assert served_name not in HOSTILE
    plan = plan_up(spec, {"gpu1": deployed((), None, {})})
    paths = [put.path for step in plan.steps for put in step.puts]
    inside = f"/var/lib/deployctl/{spec.name}/"
    assert all(posixpath.normpath(path).startswith(inside) and ".." not in path.split("/") for path in paths), paths
    if server == "triton":
        assert f"{inside}triton/{served_name}/config.pbtxt" in paths
    else:  # vLLM: the name is one argv word, never a path
        argv = [command.argv for step in plan.steps for command in step.commands if "run" in command.argv[:2]]
        assert argv and all(a[a.index("--served-model-name") + 1] == served_name for a in argv)
