"""plan_down: the deployment's containers, then the files deployctl wrote for it on every host (env files of
secrets, ranktables, Triton's repository, the weights fetcher); never the history or the lock; a re-run converges."""

import dataclasses
import textwrap

from deployctl.core import Command
from deployctl.plan.containers import LABEL_DEPLOYMENT
from deployctl.plan.down import plan_down, removed_paths
from deployctl.spec.load import load_spec_text
from tests.plan.hostfacts import deployed
from tests.plan.test_up import container_fact

TWO_HOSTS = textwrap.dedent("""\
    version: 1
    name: demo
    hosts:
      a: {address: 192.0.2.1}
      b: {address: 192.0.2.2}
      c: {address: 192.0.2.3}
    image: {name: img}
    weights: {source: s3://m/x/, dest: /srv/w}
    model: {served_name: m, max_model_len: 4096, max_num_seqs: 16, max_num_batched_tokens: 4096}
    env: {TOKEN: "${TOKEN}"}
    topology:
      mode: disaggregated
      scheduler: {host: a, port: 9000}
      prefill:
        - {host: a, devices: [0, 1], port: 8088}
      decode:
        - {host: b, devices: [0, 1], port: 8089}
    """)
STATE = "/var/lib/deployctl/demo"


def spec():
    return load_spec_text(TWO_HOSTS, environ={"TOKEN": "sekrit"})


def facts(containers: dict, files: dict):
    return {host: dataclasses.replace(deployed(containers.get(host, ())), deployment_files=files.get(host))
            for host in ("a", "b", "c")}


def test_down_removes_containers_then_every_hosts_files_and_keeps_the_history():
    s = spec()
    mine = container_fact("1", "demo-prefill-0", "running", "i", {LABEL_DEPLOYMENT: "demo"})
    other = container_fact("2", "other-prefill-0", "running", "i", {LABEL_DEPLOYMENT: "other"})
    plan = plan_down(s, facts({"a": [mine, other]}, {
        "a": (f"{STATE}/env", f"{STATE}/ranktables", f"{STATE}/weights_fetch.py"),
        "b": (f"{STATE}/env",),
        "c": ()}))
    assert [stage.name for stage in plan.stages] == ["down", "files"]
    (remove,) = plan.stages[0].steps
    assert (remove.host, remove.container, [c.argv for c in remove.commands]) == (
        "a", "demo-prefill-0", [("docker", "stop", "--time", "30", "demo-prefill-0"),
                                ("docker", "rm", "--force", "demo-prefill-0")])
    a, b = plan.stages[1].steps  # c holds nothing of it: nothing planned there
    assert a.host == "a" and a.commands[0].argv == (
        "rm", "-rf", "--", f"{STATE}/env", f"{STATE}/ranktables", f"{STATE}/weights_fetch.py")
    assert b.host == "b" and removed_paths(b) == (f"{STATE}/env",)
    # the folder goes only where nothing else is in it: the first host keeps its history.jsonl and lock there
    assert a.commands[1] == Command(("rmdir", "--", STATE), check=False)
    checked = [word for step in plan.steps for command in step.commands if command.check for word in command.argv]
    assert not [w for w in checked if w == STATE or w.endswith(("history.jsonl", "/lock", ".lock-guard"))]
    assert "--" in plan.to_json()["steps"][-1]["argv"]  # planned words, shown by `down --dry-run`


def test_down_again_plans_nothing():
    plan = plan_down(spec(), facts({}, {"a": (), "b": (), "c": ()}))
    assert not plan.changed and plan.steps == ()


def test_a_host_whose_files_are_unknown_gets_every_path_removed():
    plan = plan_down(spec(), facts({}, {"a": (), "b": ()}))  # c's probe did not answer
    (step,) = plan.steps
    assert step.host == "c" and removed_paths(step) == (
        f"{STATE}/env", f"{STATE}/ranktables", f"{STATE}/triton", f"{STATE}/weights_fetch.py")


def test_down_stops_a_running_server_as_every_stop_does_then_removes_it():
    """One stop policy (servers/shutdown.py): `docker rm --force` alone is a SIGKILL that cuts every request in
    flight; a server whose extra args hold --shutdown-timeout=300 gets 300 s, one already stopped is only removed,
    and `down --shutdown-timeout` is the floor."""
    text = TWO_HOSTS.replace("{host: b, devices: [0, 1], port: 8089}",
                             "{host: b, devices: [0, 1], port: 8089, model: {extra_args: ['--shutdown-timeout=300']}}")
    s = load_spec_text(text, environ={"TOKEN": "sekrit"})
    decode = next(i for i in s.instances if i.role == "decode")
    labels = {LABEL_DEPLOYMENT: "demo"}
    running = container_fact("1", decode.name, "running", "i", labels)
    previous = container_fact("2", decode.name + ".previous", "exited", "i", labels)
    plan = plan_down(s, facts({"b": [running, previous]}, {"a": (), "b": (), "c": ()}))
    assert {step.container: [c.argv for c in step.commands] for step in plan.stages[0].steps} == {
        decode.name: [("docker", "stop", "--time", "300", decode.name), ("docker", "rm", "--force", decode.name)],
        decode.name + ".previous": [("docker", "rm", "--force", decode.name + ".previous")]}
    floor = plan_down(s, facts({"b": [running]}, {"a": (), "b": (), "c": ()}), shutdown_timeout=900)
    assert floor.steps[0].commands[0].argv == ("docker", "stop", "--time", "900", decode.name)
