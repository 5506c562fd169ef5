"""SGLang's own server on Ascend NPUs (`server: sglang`, platform ascend; issue 43) (pure): the GPU flavour's field
table, front, P/D and stop policy, with SGLang's NPU launch and container. What it follows (SGLang's
docs/platforms/ascend/ascend_npu.md and ascend_npu_deepseek_example.md, the 0.5.23 wheel's sources):

- every server runs `--device npu --attention-backend ascend` (the docs' launches, mixed and P/D);
- a P/D server moves its KV cache with `--disaggregation-transfer-backend ascend` (MemFabric, disaggregation/
  ascend/transfer_engine.py), which reads ASCEND_MF_STORE_URL: "all sglang servers need to be config the same PIP
  and PORT", the first prefill server's address recommended; the first node of a prefill creates that store
  (managers/disagg_service.py maybe_create_ascend_config_store);
- its container maps the instance's /dev/davinci* with davinci_manager, devmm_svm and hisi_hdc, and mounts the
  driver, npu-smi and the install info (the docs' `drun`); P/D servers also get hccn.conf and hccn_tool, as
  vllm-ascend's do. It maps only the instance's own NPUs and sets no ASCEND_RT_VISIBLE_DEVICES: the runtime numbers
  a container's NPUs from 0, where SGLang's --base-gpu-id (default 0) starts (the evidence vllm-ascend's flavour
  cites: vllm-ascend #2238). The docs' `--privileged` (for RDMA) is not given: a deployment that needs it says so
  in its own container settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Optional

from deployctl.servers.features import Feature
from deployctl.servers.sglang import DEFAULT_CONNECTOR, NPU_ONLY_QUANTIZATION, TABLE, UNSUPPORTED, SglangGpu

if TYPE_CHECKING:
    from deployctl.plan.container_types import Container, RanktableFiles
    from deployctl.spec.model import EnvVar, Instance, Spec

NPU_WORDS = ("--device", "npu", "--attention-backend", "ascend")
# The docs' example port (ascend_npu_deepseek_example.md: ASCEND_MF_STORE_URL="tcp://your prefill ip1:24669")
MF_STORE_PORT = 24669
MF_STORE_ENV = "ASCEND_MF_STORE_URL"
# An A3 node has 16 NPU dies (the docs run --tp-size 16 on one Atlas 800I A3)
MAX_DEVICES = 16


def store_url(spec: "Spec") -> Optional[str]:
    """ASCEND_MF_STORE_URL for a P/D deployment on the ascend backend: the first prefill's host and the docs' port."""
    prefills = spec.role("prefill")
    if not prefills or (spec.connector or DEFAULT_CONNECTOR["ascend"]) != "ascend":
        return None
    return f"tcp://{spec.host(prefills[0].host).address}:{MF_STORE_PORT}"


class SglangAscend(SglangGpu):
    platform, server, title = "ascend", "sglang", "SGLang on Ascend"
    max_devices = MAX_DEVICES
    table = tuple(row for row in TABLE if row is not NPU_ONLY_QUANTIZATION)
    unsupported = {**UNSUPPORTED, Feature.SURGE: "a surge replacement on spare NPUs is not built for server sglang: "
                                                 "the drain rollout replaces servers in place"}

    def command(self, spec: "Spec", instance: "Instance") -> tuple[str, ...]:
        return super().command(spec, instance) + NPU_WORDS

    def container(self, spec: "Spec", instance: "Instance", ranktables: Optional["RanktableFiles"],
                  networks: Optional[Mapping]) -> "Container":
        from deployctl.facts.hccn_tool import HCCN_TOOL_PATH
        from deployctl.plan.container_types import MANAGER_DEVICES, Mount, instance_container

        mounts = [Mount("/usr/local/Ascend/driver", "/usr/local/Ascend/driver"),
                  Mount("/usr/local/sbin/npu-smi", "/usr/local/sbin/npu-smi"),
                  Mount("/etc/ascend_install.info", "/etc/ascend_install.info")]
        if instance.role in ("prefill", "decode"):
            mounts += [Mount("/etc/hccn.conf", "/etc/hccn.conf"), Mount(HCCN_TOOL_PATH, "/usr/local/bin/hccn_tool")]
        if spec.weights.dest:
            mounts.append(Mount(spec.weights.dest, spec.weights.dest))
        devices = tuple(f"/dev/davinci{d}" for d in instance.devices) + MANAGER_DEVICES
        return instance_container(spec, instance, devices=devices, mounts=tuple(mounts),
                                  command=self.command(spec, instance), env=self._env(spec, instance))

    def _env(self, spec: "Spec", instance: "Instance") -> tuple["EnvVar", ...]:
        from deployctl.spec.model import EnvVar

        url = store_url(spec)
        if url is None or instance.role not in ("prefill", "decode") or MF_STORE_ENV in {e.name for e in spec.env}:
            return ()
        return (EnvVar(MF_STORE_ENV, url, url),)
