"""`cache.compile` on the real engine, compiled (no --enforce-eager: the image carries a C++ toolchain for torch
inductor, tests/testbed/real_engine.py IMAGE_TOOLCHAIN). The first `up` compiles (vLLM saves its AOT-compiled
function and inductor's kernels under VLLM_CACHE_ROOT, the mounted cache) and seals the cache; a second `up` after
`down` compiles no kernel again: every one comes from inductor's cache in the mount. Both ledgers show the graph
phase from vLLM's own line."""

from __future__ import annotations

import pytest

from tests.real_engine.conftest import HOST, real_spec

pytestmark = pytest.mark.real_engine

NAME = "re-cc"
PORT = 8650
SERVER = f"{NAME}-mixed-0"
CACHE = "/srv/cache/re-cc"  # /srv is each bed host's own directory
# vLLM 0.32 vllm/compilation/decorators.py: after compiling (CPU: CompilationMode.DYNAMO_TRACE_ONCE with inductor,
# vllm/platforms/cpu.py; AOT compile is on with torch >= 2.10, vllm/envs.py use_aot_compile)
SAVED = "saved AOT compiled function to"


def logs(bed) -> str:
    """The server's whole log (vLLM logs to stderr)."""
    found = bed.docker_on(HOST, "logs", SERVER)
    return found.stdout + found.stderr


def kernels(bed) -> list:
    """The compiled kernels (shared objects) in inductor's cache under the host's cache directory."""
    found = bed.run_on(HOST, ["sh", "-c", f"find {CACHE} -path '*inductor_cache*' -name '*.so' | sort"]).stdout
    return found.split()


def test_a_second_up_compiles_no_kernel_the_first_put_in_the_cache(real_bed, deployctl, capsys):
    bed = real_bed
    bed.run_on(HOST, ["rm", "-rf", CACHE])
    text = real_spec(bed, NAME, (PORT,), extra=f"cache: {{compile: true, dir: {CACHE}}}\n")
    assert ", '--enforce-eager'" in text
    path = deployctl.write(text.replace(", '--enforce-eager'", ""), name=f"{NAME}.yaml")
    try:
        code, doc = deployctl.json("up", path, "--yes")
        assert code == 0, deployctl.failed
        cold = logs(bed)
        assert SAVED in cold, [line for line in cold.splitlines() if "ompil" in line]
        cold_server = doc["time_to_serve"]["instances"][SERVER]
        assert "graph_compiled_s" in cold_server, cold_server
        compiled = kernels(bed)
        assert compiled
        sealed = bed.run_on(HOST, ["sh", "-c", f"cat {CACHE}/*/.deployctl-cache"]).stdout.split()
        assert len(sealed) == 1 and len(sealed[0]) == 64, sealed
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err

        code, doc = deployctl.json("up", path, "--yes")
        assert code == 0, deployctl.failed
        assert kernels(bed) == compiled  # inductor found every kernel in the mounted cache
        warm = logs(bed)
        server = doc["time_to_serve"]["instances"][SERVER]
        assert server["source"] == "server log" and "graph_compiled_s" in server, server
        with capsys.disabled():  # a figure for the record, not an assertion
            print(f"\nreal engine start-up, cold / warm compile cache: {cold_server} / {server}; warm log: "
                  f"{[line[-200:] for line in warm.splitlines() if 'AOT' in line]}")
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
