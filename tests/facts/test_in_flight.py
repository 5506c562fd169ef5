"""facts/in_flight.py: what a drain reads of each server it took out of the front (vLLM's running and waiting
gauges on /metrics, every engine of the server added up), and what it says remained at its deadline."""

from __future__ import annotations

from deployctl.facts.in_flight import IN_FLIGHT_SCRIPT, in_flight, in_flight_probe, left_in_flight
from deployctl.facts.progress import MARK

SERVERS = (("a", "http://x:1/metrics"), ("b", "http://x:2/metrics"), ("c", "http://x:3/metrics"))


def test_in_flight_reads_vllm_gauges_and_says_what_remained():
    text = (f"{MARK} http://x:1/metrics\n# HELP vllm:num_requests_running x\n"
            'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n'
            'vllm:num_requests_running{engine="1",model_name="m"} 1.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 1.0\n'
            f"{MARK} http://x:2/metrics\nvllm:num_requests_running 0.0\nvllm:num_requests_waiting 0.0\n"
            f"{MARK} http://x:3/metrics\n\n!! no answer\n")
    counts = in_flight(text, SERVERS)
    assert counts == {"a": 4.0, "b": 0.0, "c": None}
    assert left_in_flight(counts) == "a: 4 request(s); c: its /metrics did not answer"
    assert left_in_flight({"b": 0.0}) == ""


def test_a_page_without_vllms_gauges_or_a_server_not_asked_counts_as_unknown():
    text = f"{MARK} http://x:1/metrics\nprocess_cpu_seconds_total 3.0\n"
    assert in_flight(text, SERVERS) == {"a": None, "b": None, "c": None}


def test_the_probe_passes_each_url_as_an_argument_of_a_constant_script():
    probe = in_flight_probe(SERVERS)
    assert probe.argv == ("sh", "-c", IN_FLIGHT_SCRIPT, "sh", "1", "http://x:1/metrics", "http://x:2/metrics",
                          "http://x:3/metrics")
    assert probe.parse(f"{MARK} http://x:2/metrics\nvllm:num_requests_waiting 2\n")["b"] == 2.0


def test_the_scripts_stop_rule_counts_every_flavours_gauges_with_the_hosts_awk():
    """The awk rule that decides when to stop asking: vLLM's and SGLang's running and waiting gauges each count,
    and a page holding none of them counts as empty (exit 0). Run with this machine's awk, as a host runs it."""
    import re
    import subprocess

    rule = re.search(r"awk '([^']*)'", IN_FLIGHT_SCRIPT).group(1)

    def busy(page: str) -> bool:
        return subprocess.run(["awk", rule], input=page, text=True).returncode != 0

    assert busy('vllm:num_requests_waiting{engine="0"} 1.0\n')
    assert busy("sglang:num_running_reqs 2\n") and busy('sglang:num_queue_reqs{tp_rank="0"} 1\n')
    assert not busy("sglang:num_running_reqs 0\nvllm:num_requests_running 0.0\nsglang:num_used_tokens 9\n")
    assert not busy("# HELP sglang:num_queue_reqs x\nprocess_cpu_seconds_total 3.0\n")
