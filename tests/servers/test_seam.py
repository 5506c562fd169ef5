"""The flavours are the one place that knows which server a spec runs: nothing outside deployctl/servers/ compares
`server` with a server's name (add a Flavour attribute or hook instead)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import deployctl
from deployctl.servers import FLAVOURS, flavour_for, flavour_named

PACKAGE = Path(deployctl.__file__).parent
COMPARISON = re.compile(r"server ==|server !=|\.server in|server in \(|== \"triton\"|== \"vllm-ascend\"")


def test_no_server_comparison_outside_the_flavours():
    found = [f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
             for path in sorted(PACKAGE.rglob("*.py")) if "servers" not in path.relative_to(PACKAGE).parts
             for n, line in enumerate(path.read_text().splitlines(), 1) if COMPARISON.search(line)]
    assert found == []


# A front's kind or role compared outside deployctl/fronts/ (ask its FrontKind instead): `kind == "proxy"`,
# `front.kind == ROUTER`, `.kind in ("proxy", ...)`, `role == "router"`, `role in ("scheduler", ...)`.
FRONT_NAME = r'"(?:proxy|vllm-router|scheduler|router)"'
FRONT_KIND = re.compile(rf'kind(?:"\])?\s*(?:==|!=)\s*(?:{FRONT_NAME}|PROXY\b|ROUTER\b|SCHEDULER\b)'
                        rf'|\.kind in \([^)]*{FRONT_NAME}|role\s*(?:==|!=)\s*{FRONT_NAME}'
                        rf'|role\)?\s*(?:not )?in \([^)]*{FRONT_NAME}'
                        rf'|\.get\(LABEL_ROLE\)\s*(?:==|!=)\s*{FRONT_NAME}')
# What stays, each with its reason: the flavour that runs the proxy in its own image says its container and its
# health path; export's check reads roles off the exported objects (the proxy's pod asks for no cards).
FRONT_ROLE_SITES = {
    "servers/vllm_ascend/__init__.py": 2,
    "export/check.py": 1,
}


def front_comparisons(package: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.parts[0] == "fronts":
            continue
        lines = [f"{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
                 if FRONT_KIND.search(line)]
        if lines:
            found[rel.as_posix()] = lines
    return found


def test_no_front_kind_comparison_outside_the_fronts():
    found = front_comparisons(PACKAGE)
    assert {name: len(lines) for name, lines in found.items()} == FRONT_ROLE_SITES, found


def test_the_front_seam_sees_a_comparison(tmp_path):
    """The pattern itself: each way generic code used to branch on a front, it reports."""
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "x.py").write_text('if front.kind == ROUTER:\nif kind == "vllm-router":\n'
                                            'm = 1 if entry["kind"] == "vllm-router" else None\n'
                                            'if front.kind in ("proxy", "vllm-router"):\n'
                                            'if i.role not in ("scheduler", "proxy"):\nif instance.role == "router":\n'
                                            'ok = spec.role("proxy")\n')
    (tmp_path / "fronts").mkdir()
    (tmp_path / "fronts" / "y.py").write_text('if kind == "proxy":\n')
    assert [len(v) for v in front_comparisons(tmp_path).values()] == [6]


# A flavour's capability read as a flag outside deployctl/servers/ (issue 42): generic code asks hooks that return
# data instead (host_probes, host_networks, document_units, topology_keys, topology_front, doctor_checks,
# Instance.ports, ports_of, smoke_body, own_answer_body, liveness_request, surge; features.refuses for a refused
# key). A ratchet: each file may read no more than it does now; lower a count when a site goes (the first count was
# 24).
CAPABILITY_FLAGS = {"dp_groups", "reads_host_networks", "host_tuning", "extra_ports", "supports"}
CAPABILITY_SITES: dict[str, int] = {}  # spec/build.py and spec/port_set.py ask build_topology and *_ports


def capability_reads(package: Path) -> dict[str, list[str]]:
    """file -> the lines where generic code reads a flavour's capability attribute (`.dp_groups`, `.supports(`)."""
    found: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.parts[0] == "servers":
            continue
        lines = sorted({node.lineno for node in ast.walk(ast.parse(path.read_text()))
                        if isinstance(node, ast.Attribute) and node.attr in CAPABILITY_FLAGS})
        if lines:
            text = path.read_text().splitlines()
            found[rel.as_posix()] = [f"{n}: {text[n - 1].strip()}" for n in lines]
    return found


def test_capability_flags_are_read_outside_the_flavours_no_more_than_the_ratchet_allows():
    found = capability_reads(PACKAGE)
    over = {name: lines for name, lines in found.items() if len(lines) > CAPABILITY_SITES.get(name, 0)}
    assert over == {}, "ask a flavour hook that returns data (servers/base.py) instead"
    assert sum(map(len, found.values())) <= sum(CAPABILITY_SITES.values()) == 0


def test_the_capability_ratchet_sees_a_read(tmp_path):
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "x.py").write_text("import deployctl.spec.dp_groups\nfrom deployctl.spec import dp_groups\n"
                                            "if flavour_of(spec).reads_host_networks and c.flavour.dp_groups:\n"
                                            "    ok = flavour.supports(Feature.SURGE)\n")
    (tmp_path / "servers").mkdir()
    (tmp_path / "servers" / "y.py").write_text("if self.dp_groups:\n")
    assert capability_reads(tmp_path) == {"plan/x.py": [
        "3: if flavour_of(spec).reads_host_networks and c.flavour.dp_groups:", "4: ok = flavour.supports(Feature.SURGE)"]}


def test_the_registry_is_keyed_by_platform_and_server():
    assert set(FLAVOURS) == {("ascend", "vllm"), ("ascend", "vllm-ascend"), ("gpu", "vllm"), ("gpu", "triton"),
                             ("gpu", "sglang"), ("ascend", "sglang")}
    assert flavour_for("ascend", "triton") is None
    # a spec on the wrong platform is still checked by its server's rules (validate names the platform)
    assert flavour_named("ascend", "triton").server == "triton"
    assert flavour_named("gpu", "vllm-ascend").server == "vllm-ascend"


def test_each_flavour_answers_health_and_answer_paths():
    from deployctl.spec.model import Instance, ModelArgs, Spec

    spec = Spec(version=1, name="d", hosts=(), model=ModelArgs(served_name="m"), mode="mixed", instances=())
    proxy = Instance(role="proxy", index=0, host="h", devices=(), port=8000, name="d-proxy", tp=0)
    assert {k: f.health_path() for k, f in FLAVOURS.items()} == {
        ("ascend", "vllm"): "/health", ("ascend", "vllm-ascend"): "/health", ("gpu", "vllm"): "/health",
        ("gpu", "triton"): "/v2/health/ready", ("gpu", "sglang"): "/health", ("ascend", "sglang"): "/health"}
    assert FLAVOURS[("ascend", "vllm-ascend")].health_path(proxy) == "/healthcheck"
    assert FLAVOURS[("gpu", "triton")].answers_path(spec) == "/v2/models/m/generate"
    assert FLAVOURS[("ascend", "vllm")].answers_path(spec) == "/v1/completions"


def test_servers_import_plan_only_inside_functions():
    """spec/ asks the flavours for its rules, and plan/ imports them: at import time servers/ sits below both."""
    for path in sorted((PACKAGE / "servers").glob("*.py")):
        tree = ast.parse(path.read_text())
        top = {node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
        assert sorted(m for m in top if m.startswith("deployctl.plan")) == [], path.name


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of a tree's docstring nodes (which may cite what code may not spell)."""
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def metric_literals(package: Path) -> list[str]:
    """Code strings outside servers/ that spell a vLLM metric name (`vllm:...`); docstrings and comments may cite."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.parts[0] == "servers":
            continue
        tree = ast.parse(path.read_text())
        docs = docstrings(tree)
        found += [f"{rel.as_posix()}:{node.lineno}: {node.value[:60]}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and "vllm:" in node.value
                  and id(node) not in docs]
    return found


def test_no_metric_name_outside_the_flavours():
    """bench's telemetry, `watch` and a drain read the names the flavours write (servers/metrics.py)."""
    assert metric_literals(PACKAGE) == []


def test_the_metric_seam_sees_a_name(tmp_path):
    (tmp_path / "facts").mkdir()
    (tmp_path / "facts" / "x.py").write_text('"""Reads vllm:num_requests_running."""\n'
                                             'NAMES = ("vllm:num_requests_running",)  # vllm:x in a comment\n')
    assert metric_literals(tmp_path) == ["facts/x.py:2: vllm:num_requests_running"]


def test_every_flavours_metric_names_are_read():
    """A flavour's names are ones the generic readers know (servers/metric_names.py): its gauges are read by name."""
    from deployctl.servers.metric_names import names_of

    fields = ("running", "waiting", "kv_usage", "generation_tokens", "prompt_tokens")
    assert [(k, field) for k, f in FLAVOURS.items() for field in fields
            if getattr(f.metrics, field) not in names_of(field)] == []


# Topology-shaped data read outside deployctl/servers/ and deployctl/fronts/ (issue 42): vllm-ascend's DP groups
# (`spec.upstream`, `.dp_launch`, "dp_launch", an instance's `.server` ranks, `DpGroup`, `UpstreamTopology`,
# deployctl.spec.dp_groups), engine flag names a flavour's table or module spells, and SGLang's metric names.
# Generic code asks the flavour's hooks (servers/base.py) for the data instead. `.server` on these receivers is a
# server's name (spec, rules context) or another kind of server (docker's version, an HTTP server, a ranktable's).
TOPOLOGY_ATTRS = {"upstream", "dp_launch"}
TOPOLOGY_NAMES = {"DpGroup", "UpstreamTopology", "dp_groups"}
GROUPS_MODULE = "deployctl.servers.vllm_ascend.groups"  # spec/dp_groups.py, moved to vllm-ascend's package
NAMED_SERVER = {"spec", "c", "self", "version", "swarm", "local", "http", "context"}
# deployctl's own command-line flags and docker's, which share a spelling with an engine's
OWN_FLAGS = {"--", "--shutdown-timeout", "--host", "--served-model-name", "--device"}


def engine_flags() -> set[str]:
    """Every `--flag` the flavours' modules spell in code (their tables and their launch words)."""
    flags = set()
    for path in (PACKAGE / "servers").rglob("*.py"):
        flags |= {node.value.split("=")[0] for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("--")
                  and " " not in node.value}
    return flags - OWN_FLAGS


def flavour_shaped(package: Path, flags: set[str]) -> dict[str, list[str]]:
    """file -> the lines outside servers/ and fronts/ that read topology-shaped data, spell an engine flag or an
    SGLang metric name (code only: docstrings and comments may cite)."""
    found: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.parts[0] in ("servers", "fronts"):
            continue
        tree = ast.parse(path.read_text())
        docs = docstrings(tree)
        lines = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and (
                    node.attr in TOPOLOGY_ATTRS or node.attr in TOPOLOGY_NAMES
                    or (node.attr == "server" and not (isinstance(node.value, ast.Name)
                                                       and node.value.id in NAMED_SERVER))):
                lines.add(node.lineno)
            elif isinstance(node, ast.Name) and node.id in TOPOLOGY_NAMES:
                lines.add(node.lineno)
            elif isinstance(node, ast.ImportFrom) and node.module and (
                    node.module.endswith("dp_groups") or node.module == GROUPS_MODULE
                    or any(a.name in TOPOLOGY_NAMES for a in node.names)):
                lines.add(node.lineno)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs and (
                    node.value == "dp_launch" or node.value.split("=")[0] in flags or "sglang:" in node.value):
                lines.add(node.lineno)
        if lines:
            text = path.read_text().splitlines()
            found[rel.as_posix()] = [f"{n}: {text[n - 1].strip()}" for n in sorted(lines)]
    return found


# A ratchet (each file no more than now; lower a count when a site goes): the first count was 87.
FLAVOUR_SHAPED_SITES = {
    "spec/model.py": 1,  # Instance.server's type, under TYPE_CHECKING
}


def test_flavour_shaped_reads_outside_the_flavours_no_more_than_the_ratchet_allows():
    found = flavour_shaped(PACKAGE, engine_flags())
    over = {name: lines for name, lines in found.items() if len(lines) > FLAVOUR_SHAPED_SITES.get(name, 0)}
    assert over == {}, "ask a flavour hook that returns data (servers/base.py) instead"
    assert sum(map(len, found.values())) <= sum(FLAVOUR_SHAPED_SITES.values())


def test_the_flavour_shaped_seam_sees_each_kind(tmp_path):
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "x.py").write_text(
        '"""Reads spec.upstream and --data-parallel-rank."""\n'
        "from deployctl.spec.dp_groups import DpGroup\n"
        "if spec.upstream is not None:\n"
        "    launch = spec.upstream.dp_launch\n"
        "ranks = [r.rank for r in instance.server.ranks] if members[0].server else []\n"
        'key = ("topology", "dp_launch")\n'
        'flag = "--data-parallel-rank"\n'
        'name = "sglang:num_running_reqs"\n'
        "ok = spec.server, c.server, version.server, '--shutdown-timeout'\n")
    (tmp_path / "servers").mkdir()
    (tmp_path / "servers" / "y.py").write_text("if spec.upstream:\n")
    assert [line.split(":")[0] for line in flavour_shaped(tmp_path, {"--data-parallel-rank"})["plan/x.py"]] == [
        "2", "3", "4", "5", "6", "7", "8"]


def test_the_flavour_shaped_seam_sees_the_moved_groups_module(tmp_path):
    """spec/dp_groups.py now lives in vllm-ascend's package: generic code importing it there still counts."""
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "x.py").write_text("from deployctl.servers.vllm_ascend.groups import servers_of\n")
    assert flavour_shaped(tmp_path, set()) == {"plan/x.py": ["1: from deployctl.servers.vllm_ascend.groups import "
                                                             "servers_of"]}


def test_flavour_shaped_sites_outside_the_flavours_and_fronts_are_at_most_five():
    """Issue 42's bound, every kind together: capability flags, topology-shaped data, engine flag and metric names,
    front kinds compared (servers/ and fronts/ own theirs)."""
    front = {name: lines for name, lines in front_comparisons(PACKAGE).items() if not name.startswith("servers/")}
    sites = [*(f"{name}:{line}" for found in (capability_reads(PACKAGE), flavour_shaped(PACKAGE, engine_flags()), front)
               for name, lines in found.items() for line in lines), *metric_literals(PACKAGE)]
    assert len(sites) <= 5, sites
