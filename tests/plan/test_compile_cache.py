"""cache.compile: one directory per (image, model, parallel layout), mounted into the compiling servers, copied
from a host that holds it sealed, never shared across keys; and its spec rules at their path and line."""

from __future__ import annotations

import textwrap

import pytest

from deployctl.facts.compile_cache import parse_cache_state
from deployctl.plan.compile_cache import CONTAINER_DIR, CacheCopy, cache_key, plan_cache
from deployctl.plan.up import UpInputs, plan_up
from deployctl.spec.load import check_spec_text, load_spec_text
from deployctl.facts.deployed import DeployedState
from deployctl.facts.model import HostFacts

TWO_HOSTS = textwrap.dedent("""\
    version: 1
    name: cc
    hosts:
      h1: {address: 192.0.2.11}
      h2: {address: 192.0.2.12}
    image: {name: deployctl/vllm-ascend:6.3.909}
    weights: {source: obs://models/m/, dest: /mnt/weights/m}
    model: {served_name: m, max_model_len: 4096}
    cache: {compile: true, dir: /var/cache/dc}
    topology:
      mode: mixed
      instances:
        - {host: h1, devices: [0, 1], port: 8080}
        - {host: h2, devices: [0, 1], port: 8080}
        - {host: h2, devices: [2, 3, 4, 5], port: 8081}
    """)


def facts(sealed=None, image="sha256:aaaa1111"):
    sealed = sealed or {}
    return {h: HostFacts(deployed=DeployedState((), image, {}, {}), compile_cache=sealed.get(h, {}))
            for h in ("h1", "h2")}


def run_words(plan, name):
    step = next(s for s in plan.steps if s.container == name and s.stage == "workers")
    return step.commands[0].argv


def test_the_key_is_in_the_name_and_changes_with_image_model_and_layout():
    s = load_spec_text(TWO_HOSTS)
    a, b, c = s.instances
    assert cache_key(s, a, "sha256:aaaa").name == cache_key(s, b, "sha256:aaaa").name  # same layout, other host
    assert cache_key(s, a, "sha256:aaaa").name != cache_key(s, c, "sha256:aaaa").name  # tp 2 vs tp 4
    assert cache_key(s, a, "sha256:aaaa").name != cache_key(s, a, "sha256:bbbb").name  # another image
    other_model = load_spec_text(TWO_HOSTS.replace("max_model_len: 4096", "max_model_len: 2048"))
    assert cache_key(s, a, "sha256:aaaa").name != cache_key(other_model, other_model.instances[0], "sha256:aaaa").name
    assert cache_key(s, c, "sha256:aaaa1111").name.startswith("aaaa1111-tp4-")


@pytest.mark.parametrize("before, after", [
    ("max_model_len: 4096}", "max_model_len: 4096, extra_args: [--enforce-eager]}"),
    ("max_model_len: 4096}", "max_model_len: 4096, quantization: awq}"),
    ("max_model_len: 4096}", "max_model_len: 4096, kv_cache_dtype: int8, quantization_param_path: /mnt/kv}"),
    ("source: obs://models/m/", "source: obs://models/other/"),
    ("dest: /mnt/weights/m}", "dest: /mnt/weights/other}"),
    ("{host: h1, devices: [0, 1], port: 8080}", "{host: h1, devices: [0, 1], port: 8080, model: {extra_args: [-O0]}}"),
], ids=["extra_args", "quantization", "kv_cache_dtype", "source", "dest", "instance extra_args"])
def test_every_engine_argument_that_shapes_the_graphs_changes_the_key(before, after):
    """A cache compiled with other engine arguments is never reused: each one alone gives another key."""
    assert TWO_HOSTS.count(before) == 1
    s, changed = load_spec_text(TWO_HOSTS), load_spec_text(TWO_HOSTS.replace(before, after))
    assert cache_key(s, s.instances[0], "sha256:aaaa").name != \
        cache_key(changed, changed.instances[0], "sha256:aaaa").name


def test_servers_get_their_keys_directory_and_the_profiles_cache_variable():
    s = load_spec_text(TWO_HOSTS)
    plan = plan_up(s, facts(), UpInputs())
    words = run_words(plan, "cc-mixed-0")
    key = cache_key(s, s.instances[0], "sha256:aaaa1111").name
    assert f"/var/cache/dc/{key}:{CONTAINER_DIR}" in words  # read-write
    assert f"VLLM_CACHE_ROOT={CONTAINER_DIR}" in words
    # sealed once the deploy served (finalize), so that later deploys and other hosts reuse it
    step = next(st for st in plan.steps if st.container == "cc-mixed-0" and st.stage == "workers")
    assert any(f"/var/cache/dc/{key}" in c.argv for c in step.finalize)


def test_cold_hosts_make_their_directories_and_a_warm_host_is_copied_from():
    s = load_spec_text(TWO_HOSTS)
    tp2 = cache_key(s, s.instances[0], "sha256:aaaa1111").name
    tp4 = cache_key(s, s.instances[2], "sha256:aaaa1111").name
    cold = plan_up(s, facts(), UpInputs())
    stage = next(st for st in cold.stages if st.name == "cache")
    made = {st.host: st.commands[0].argv for st in stage.steps}
    assert f"/var/cache/dc/{tp2}" in made["h1"] and f"/var/cache/dc/{tp4}" in made["h2"]
    warm = plan_up(s, facts({"h1": {tp2: "d" * 64}}), UpInputs())
    stage = next(st for st in warm.stages if st.name == "cache")
    # h1 holds it: the copy is h1's step (its tar goes host to host), h2 only makes its cold tp4 directory
    assert [(st.host, st.action) for st in stage.steps] == [("h1", "run"), ("h2", "run")]
    (copy,) = stage.steps[0].actions
    assert copy == CacheCopy(tp2, "/var/cache/dc", "h1", "d" * 64, ("h2",))
    assert not stage.steps[0].commands and not stage.steps[1].actions
    assert stage.steps[1].commands[0].argv[-1] == f"/var/cache/dc/{tp4}"  # the tp4 key is cold everywhere
    assert copy.to_json()["from"] == "h1" and copy.to_json()["to"] == ["h2"]


def test_one_step_on_the_host_that_holds_a_key_copies_it_to_every_host_that_needs_it():
    hosts = "  h2: {address: 192.0.2.12}\n"
    tp4 = "    - {host: h2, devices: [2, 3, 4, 5], port: 8081}\n"
    assert hosts in TWO_HOSTS and tp4 in TWO_HOSTS
    s = load_spec_text(TWO_HOSTS.replace(hosts, hosts + "  h3: {address: 192.0.2.13}\n")
                       .replace(tp4, "    - {host: h3, devices: [0, 1], port: 8080}\n"))
    stage = plan_cache(s, {"h2": {"k1": "d" * 64}}, {"h1": {"k1"}, "h2": {"k1"}, "h3": {"k1"}})
    assert [(st.host, st.action) for st in stage.steps] == [("h2", "run")]
    (copy,) = stage.steps[0].actions
    assert (copy.source, copy.targets, copy.digest) == ("h2", ("h1", "h3"), "d" * 64)
    assert stage.steps[0].reason == "copy k1 to h1, h3"


def test_a_cache_of_another_key_is_never_copied_or_used():
    s = load_spec_text(TWO_HOSTS)
    stage = plan_cache(s, {"h1": {"otherimage-tp2-0123456789abcdef": "d" * 64}}, {"h1": {"k1"}, "h2": {"k1"}})
    assert all(not st.actions for st in stage.steps)


def test_without_cache_compile_nothing_changes():
    s = load_spec_text(TWO_HOSTS.replace("cache: {compile: true, dir: /var/cache/dc}\n", ""))
    plan = plan_up(s, facts(), UpInputs())
    assert "cache" not in [st.name for st in plan.stages]
    assert not any(CONTAINER_DIR in w for w in run_words(plan, "cc-mixed-0"))


def test_the_probe_parser_reads_sealed_directories():
    assert parse_cache_state(f"k1\t{'ab' * 32}\nbroken line\nk2\t\n") == {"k1": "ab" * 32}


@pytest.mark.parametrize("marker", ["ab" * 31, "AB" * 32, "ab" * 32 + "0", "not a digest", "{}",
                                    "ab" * 16 + " " + "ab" * 16],
                         ids=["cut", "upper", "long", "words", "json", "space"])
def test_a_damaged_seal_is_no_seal_neither_warm_nor_copied_from(marker):
    """A marker read back from a host that holds no sha256 digest: the directory was planned warm and copied to the
    other hosts, whose copy could never verify against it (every `up` failed in the cache stage)."""
    s = load_spec_text(TWO_HOSTS)
    tp2 = cache_key(s, s.instances[0], "sha256:aaaa1111").name
    assert parse_cache_state(f"{tp2}\t{marker}\n") == {}
    plan = plan_up(s, facts({"h1": parse_cache_state(f"{tp2}\t{marker}\n")}), UpInputs())
    stage = next(st for st in plan.stages if st.name == "cache")
    assert not any(st.actions for st in stage.steps)  # nothing copied from h1
    assert f"/var/cache/dc/{tp2}" in stage.steps[0].commands[0].argv  # h1's key is cold: its servers compile


def test_a_second_line_of_a_damaged_marker_is_no_key():
    assert parse_cache_state(f"k1\tcut\nk2\t{'ab' * 32}\n") == {"k2": "ab" * 32}


def _errors(text):
    spec, errors, _ = check_spec_text(text, "spec.yaml", environ={})
    assert spec is None
    return errors


def _line(text, needle):
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def test_rules_refuse_at_the_path_and_line():
    text = TWO_HOSTS.replace("dir: /var/cache/dc", "dir: /var/cache/a:b")
    (error,) = _errors(text)
    assert error.dotted_path == "cache.dir" and "':'" in error.message and error.line == _line(text, "cache:")
    text = TWO_HOSTS.replace("dir: /var/cache/dc", "dir: /mnt/weights")
    (error,) = _errors(text)
    assert error.dotted_path == "cache.dir" and "weights.dest" in error.message
    text = TWO_HOSTS.replace("compile: true", "compile: yes please")
    assert _errors(text)[0].dotted_path == "cache.compile"


def test_triton_has_no_compile_cache_to_keep():
    text = textwrap.dedent("""\
        version: 1
        name: t
        platform: gpu
        server: triton
        hosts:
          gpu1: {address: 198.51.100.7}
        image: {name: nvcr.io/nvidia/tritonserver:24.08-vllm-python-py3}
        weights: {source: s3://models/opt/, dest: /mnt/weights/opt}
        model: {served_name: opt, max_model_len: 2048, max_num_seqs: 64, max_num_batched_tokens: 2048}
        cache:
          compile: true
        topology:
          mode: mixed
          instances:
            - {host: gpu1, devices: [0], port: 8000}
        """)
    (error,) = _errors(text)
    assert error.dotted_path == "cache.compile" and error.line == _line(text, "compile: true")


def test_a_host_of_the_spec_that_serves_nothing_may_give_its_cache():
    s = load_spec_text(TWO_HOSTS.replace("        - {host: h1, devices: [0, 1], port: 8080}\n", ""))
    tp2 = cache_key(s, s.instances[0], "sha256:aaaa1111").name
    plan = plan_up(s, facts({"h1": {tp2: "e" * 64}}), UpInputs())
    stage = next(st for st in plan.stages if st.name == "cache")
    assert [a.source for st in stage.steps for a in st.actions] == ["h1"]


def test_vllm_ascend_ranks_get_their_release_lines_cache_env_and_the_proxy_none():
    from tests.plan.test_upstream import argv_of, env_of, facts as upstream_facts
    from tests.spec.test_upstream_build import QWEN3

    text = (QWEN3 % "external") + "cache: {compile: true}\n"
    for image, extra in (("v0.23.0-a3", set()), ("v0.11.0", {"TORCHAIR_CACHE_HOME"})):
        spec = load_spec_text(text.replace("v0.23.0-a3", image))
        plan = plan_up(spec, upstream_facts(spec))
        env = env_of(argv_of(plan, "qwen3-decode0-r5"))
        assert {k for k, v in env.items() if v == CONTAINER_DIR} == {"VLLM_CACHE_ROOT"} | extra
        proxy = argv_of(plan, "qwen3-proxy")
        assert not any(CONTAINER_DIR in w for w in proxy)
        stage = next(st for st in plan.stages if st.name == "cache")
        # prefill (DP2 x TP8) and decode (DP8 x TP4) ranks have other layouts: other keys, other directories
        made = {w for st in stage.steps for c in st.commands for w in c.argv if w.startswith("/var/cache/")}
        assert len(made) >= 2 and all("-tp" in w for w in made)
