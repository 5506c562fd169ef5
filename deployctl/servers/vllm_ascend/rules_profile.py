"""Rules of a `server: vllm-ascend` spec that follow what upstream refuses or silently ignores (contract: "Settled
on 2026-11-25"): the keys a release removed, Mooncake missing from the image, the KV connector a release has and
DeepSeek-V4 needs, the Mooncake connector's tp check,
speculative decoding in P/D and its draft model, context-parallel sizes, reduce-sampling and prefix caching with
P/D, kv ports inside the connector's random range, and ASCEND_RT_VISIBLE_DEVICES written with host ids. Each cites
its upstream source."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterator, Optional

from deployctl.core import flag_value
from deployctl.errors import Problem
from deployctl.servers.vllm_ascend.groups import connector_port_range
from deployctl.spec.profiles import (
    SOURCE_DEFAULT, SOURCE_OVERRIDE, SOURCE_TAG, ProfileChoice, parse_version, select_profile,
)

if TYPE_CHECKING:
    from deployctl.spec.rules import Context, Unit

VISIBLE = "ASCEND_RT_VISIBLE_DEVICES"
# Hybrid (Mamba/GDN) models: Qwen3-Next and the Qwen3.5/3.6 series, as vllm-ascend's P/D tutorial names them
# (HEAD:docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md:259).
_HYBRID = re.compile(r"qwen3[._-]?(next|[56](?!\d))", re.IGNORECASE)
_CP_FLAGS = {"--prefill-context-parallel-size": "prefill", "-pcp": "prefill",
             "--decode-context-parallel-size": "decode", "-dcp": "decode"}
# vLLM's refusal of a dense model's external DP (vllm/engine/arg_utils.py:2456-2465): the release lines from it on
DENSE_EXTERNAL_DP_REFUSED_FROM = parse_version("0.23")
# A model name that counts its active parameters (`Qwen3-235B-A22B`, `Qwen3-30B-A3B`) or says MoE (`Mixtral-8x7B`)
_MOE_NAME = re.compile(r"(?:^|[-_./\s])(a\d+(?:\.\d+)?b|moe|mixtral)(?=$|[-_./\s])", re.IGNORECASE)
# The speculative methods whose drafter is a model of its own, which vLLM does not find without `model`
# (vLLM 0.33.0 vllm/config/speculative.py:1252-1295; custom_class: the proposer's module path)
DRAFT_METHODS = ("eagle", "eagle3", "dflash", "draft_model", "custom_class")
MOONCAKE_TP_CHECK = ("vllm_ascend/distributed/kv_transfer/kv_p2p/mooncake_connector.py:2055 (HEAD) raises "
                     "'prefill_tp_size ... must be greater than or equal to the decode_tp_size' at start")


def _named(unit: Unit) -> str:
    """`decode group 0`: how messages name a group (as dp_groups' rules do)."""
    return f"{unit.role} group {unit.path[2]}"


def profile_choice(c: Context) -> ProfileChoice:
    """The profile validate assumes: server_version, else the image tag, else the newest (no facts here)."""
    return select_profile(c.value(("server_version",), str), c.value(("image", "name"), str))


def check_profile(c: Context) -> Iterator[Problem]:
    """The profile's warning; its removed keys; Mooncake in the image (servers/vllm_ascend/ runs it)."""
    choice = profile_choice(c)
    where = _version_path(c, choice)
    # without an image there is nothing to run yet, and nothing to name
    if choice.warning and (choice.source != SOURCE_DEFAULT or c.value(("image", "name"), str)):
        yield Problem(where, choice.warning, severity="warning",
                      hint="write server_version: (e.g. 0.13) or use an image tagged with its version")
    yield from _removed_keys(c, choice)
    yield from _dense_external_dp(c, choice)
    connector = c.value(("topology", "connector"), str)
    if c.mode == "disaggregated" and connector in ("mooncake", "mooncake_hybrid") and not choice.has_mooncake:
        yield Problem(where, f"vllm-ascend {choice.shown} images have no Mooncake, which connector {connector} "
                             f"needs (built in from v{choice.profile.mooncake_from}: vllm-ascend's Dockerfile.a3 at "
                             f"that tag)",
                      hint="use a newer image, e.g. quay.io/ascend/vllm-ascend:v0.13.0-a3")
    elif c.mode == "disaggregated":
        yield from _connector_for_the_model(c, choice, where, connector)


def _connector_for_the_model(c: Context, choice: ProfileChoice, where: tuple, connector: Optional[str]
                             ) -> Iterator[Problem]:
    """MooncakeHybridConnector exists from v0.20.2rc1; DeepSeek-V4 P/D needs it until MooncakeConnectorV1 learned
    its KV groups (vllm-ascend #10342, v0.22.1rc1). Sources: the `hybrid` entry of the profile's sources."""
    profile, version, shown = choice.profile, choice.version, choice.shown or f"{choice.profile.line} (newest)"
    if connector == "mooncake_hybrid" and not profile.has_hybrid_connector(version):
        first = "0.20.2rc1"  # the first release of any line with it (profiles' `hybrid.from`)
        yield Problem(("topology", "connector"),
                      f"vllm-ascend {shown} registers no MooncakeHybridConnector: vLLM's connector factory refuses "
                      f"the name at start (added by vllm-ascend #9270, first released in v{first}: "
                      f"vllm_ascend/distributed/kv_transfer/__init__.py:32-36 at that tag)",
                      hint=f"use connector: mooncake, or an image of v{first} or newer")
    elif connector == "mooncake" and _is_deepseek_v4(c) and not profile.v1_runs_deepseek_v4(version):
        yield Problem(("topology", "connector"),
                      f"DeepSeek-V4 P/D on vllm-ascend {shown} needs MooncakeHybridConnector: this release's "
                      f"MooncakeConnectorV1 does not move DeepSeek-V4's compressed and sliding-window KV groups "
                      f"(learned in vllm-ascend #10342, first released in v0.22.1rc1); upstream runs DeepSeek-V4 P/D "
                      f"with the hybrid connector (tests/e2e/nightly/multi_node/external_dp/config/"
                      f"DeepSeek-V4-flash-w8a8-PD-prefix.yaml:107 at v0.23.0)",
                      hint="write connector: mooncake_hybrid" + (
                          "" if profile.has_hybrid_connector(version) else ", with an image of v0.20.2rc1 or newer"))


# DeepSeek-V4's checkpoints (`DeepSeek-V4-Flash`, `deepseek_v4`), as upstream's configs and tutorials name them
_DEEPSEEK_V4_NAME = re.compile(r"deepseek[-_.]?v4", re.IGNORECASE)


def _is_deepseek_v4(c: Context) -> bool:
    """config.json's model_type where validate could read it (what vllm-ascend itself tests:
    HEAD:vllm_ascend/attention/dsa_v1.py:400), else the model's names."""
    shape = c.model_shape
    if shape is not None and shape.model_type is not None:
        return shape.model_type == "deepseek_v4"
    names = (c.value(("weights", "source"), str), c.value(("weights", "dest"), str),
             c.value(("model", "served_name"), str))
    return any(name and _DEEPSEEK_V4_NAME.search(name) for name in names)


def _dense_external_dp(c: Context, choice: ProfileChoice) -> Iterator[Problem]:
    """From vLLM 0.23 a dense model's `vllm serve` with --data-parallel-rank and a dp above 1 exits at start
    (vLLM 0.33.0 vllm/engine/arg_utils.py:2456-2465; vllm-ascend #11863 hit it on v0.21.0rc1)."""
    if (c.value(("topology", "dp_launch"), str) != "external"
            or parse_version(choice.profile.line) < DENSE_EXTERNAL_DP_REFUSED_FROM):
        return
    moe, why = _model_is_moe(c)
    if moe:
        return
    for unit in c.groups:
        dp = c.value(unit.path + ("dp",), int)
        if dp is None or dp <= 1:
            continue
        refusal = ("vLLM refuses dp_launch: external with dp > 1 for a dense model from 0.23 ('Non-MoE models do "
                   "not support external data parallel mode': vllm/engine/arg_utils.py:2456-2465, vLLM 0.33.0)")
        hint = "use dp_launch: internal, or groups of dp: 1 (independent servers behind the proxy)"
        if moe is False:
            yield Problem(unit.path + ("dp",), f"{_named(unit)} runs dp {dp} but {why}: {refusal}",
                          hint=f"{hint} ({choice.describe()})")
        elif c.value(unit.path + ("expert_parallel",), bool) is not True and (
                choice.source != SOURCE_DEFAULT or c.value(("image", "name"), str)):  # as the profile's warning
            yield Problem(unit.path + ("dp",), f"{_named(unit)} runs dp {dp} and deployctl cannot tell whether the "
                                               f"model is a mixture of experts ({why}): {refusal}",
                          severity="warning", hint="write model.moe: true (MoE) or false (dense); for a dense "
                                                   f"model, {hint}")


def _model_is_moe(c: Context) -> tuple[Optional[bool], str]:
    """Whether the model is MoE and what says so: the weights' config.json where validate could read it, else
    model.moe, else a name that counts its active parameters (Qwen3-235B-A22B) or says MoE; None: unknown."""
    shape = c.model_shape
    if shape is not None:
        return shape.moe, (f"its config.json at weights.source has {shape.key}: {shape.experts}" if shape.moe
                           else "its config.json at weights.source names no experts (a dense model)")
    written = c.value(("model", "moe"), bool)
    if written is not None:
        return written, f"model.moe is {str(written).lower()}"
    names = (c.value(("weights", "source"), str), c.value(("weights", "dest"), str),
             c.value(("model", "served_name"), str))
    if any(name and _MOE_NAME.search(name) for name in names):
        return True, "its name says MoE"
    return None, "no config.json readable at weights.source, no model.moe"


def _version_path(c: Context, choice: ProfileChoice) -> tuple:
    if choice.source == SOURCE_OVERRIDE:
        return ("server_version",)
    if choice.source == SOURCE_TAG or c.value(("image", "name"), str):
        return ("image", "name")
    return ("server",)


def _removed_keys(c: Context, choice: ProfileChoice) -> Iterator[Problem]:
    profile = choice.profile
    for unit in c.groups:
        config = c.value(unit.path + ("model", "additional_config"), dict) or {}
        for key in config:
            path = unit.path + ("model", "additional_config", key)
            if key in profile.removed_additional_config:
                yield Problem(path, f"additional_config.{key} is gone from vllm-ascend {profile.line} and silently "
                                    f"ignored: {profile.removed_additional_config[key]}",
                              hint=f"remove it ({choice.describe()})")
            elif key in profile.renamed_additional_config:
                new = profile.renamed_additional_config[key]
                yield Problem(path, f"additional_config.{key} is called {new} in vllm-ascend {profile.line}",
                              hint=f"write {new} ({choice.describe()})")


def check_pd_traps(c: Context) -> Iterator[Problem]:
    """What a P/D deployment of vllm-ascend refuses at start or serves wrong (each rule cites upstream)."""
    yield from _visible_devices(c)
    yield from _kv_port_range(c)
    yield from _draft_model(c)
    if c.mode != "disaggregated":
        return
    prefill = [u for u in c.groups if u.role == "prefill"]
    decode = [u for u in c.groups if u.role == "decode"]
    hybrid = _hybrid_model(c)
    yield from _tp_order(c, prefill, decode)
    yield from _speculative(c, prefill, decode, hybrid)
    yield from _context_parallel(c, prefill, decode)
    for unit in prefill + decode:
        if c.value(unit.path + ("model", "additional_config", "enable_reduce_sample"), bool) is True:
            yield Problem(unit.path + ("model", "additional_config", "enable_reduce_sample"),
                          "reduce sampling garbles the output with P/D disaggregation (vllm-ascend #12827, #13469; "
                          "#13543 turns it off when kv_role is not kv_both)", hint="remove enable_reduce_sample")
        if hybrid and "--enable-prefix-caching" in _flags(c, unit):
            yield Problem(unit.path + ("model", "extra_args"),
                          "prefix caching with P/D fails for hybrid models such as Qwen3-Next and Qwen3.5 "
                          "(vllm-ascend #7944; the P node hangs on a hit, #7722)",
                          hint="remove --enable-prefix-caching: deployctl renders --no-enable-prefix-caching in P/D")


def _hybrid_model(c: Context) -> bool:
    names = (c.value(("model", "served_name"), str), c.value(("weights", "dest"), str),
             c.value(("weights", "source"), str), c.value(("model", "family"), str))
    return any(name and _HYBRID.search(name) for name in names)


def _tp_order(c: Context, prefill: list, decode: list) -> Iterator[Problem]:
    decode_tps = [tp for tp in (c.value(u.path + ("tp",), int) for u in decode) if tp is not None]
    if not decode_tps:
        return
    for unit in prefill:
        tp = c.value(unit.path + ("tp",), int)
        if tp is not None and tp < max(decode_tps):
            yield Problem(unit.path + ("tp",), f"prefill tp {tp} is smaller than decode tp {max(decode_tps)}: "
                                               f"vllm-ascend's Mooncake connector refuses it ({MOONCAKE_TP_CHECK})",
                          hint="give prefill a tp at least decode's (a multiple of it)")


def _speculative(c: Context, prefill: list, decode: list, hybrid: bool) -> Iterator[Problem]:
    """Upstream's P/D rule (HEAD:docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md:258-260):
    prefill proposes 1 token while decode proposes 1 or more; hybrid models propose as many on both."""
    specs = {id(u): c.value(u.path + ("speculative",), dict) for u in prefill + decode}
    if not any(specs.values()):
        return
    first = next(u for u in prefill + decode if specs[id(u)])
    for unit in prefill + decode:
        spec = specs[id(unit)]
        if spec is None:
            if "speculative" not in unit.data:
                yield Problem(unit.path, f"{_named(first)} uses speculative decoding but this {unit.role} group does "
                                         f"not: in P/D both roles must (vllm-ascend's P/D tutorial)",
                              hint=f"add speculative: {{method: {specs[id(first)].get('method')}, "
                                   f"num_speculative_tokens: 1}}")
            continue
        if spec.get("method") != specs[id(first)].get("method"):
            yield Problem(unit.path + ("speculative", "method"),
                          f"method {spec.get('method')!r} differs from {_named(first)}'s "
                          f"{specs[id(first)].get('method')!r}: prefill and decode run one speculative method")
    tokens = {id(u): (specs[id(u)] or {}).get("num_speculative_tokens") for u in prefill + decode}
    decode_tokens = [t for u in decode for t in [tokens[id(u)]] if isinstance(t, int)]
    for unit in prefill:
        n = tokens[id(unit)]
        if not isinstance(n, int):
            continue
        path = unit.path + ("speculative", "num_speculative_tokens")
        if hybrid and decode_tokens and n != decode_tokens[0]:
            yield Problem(path, f"prefill proposes {n} speculative tokens, decode {decode_tokens[0]}: for a hybrid "
                                f"model both must propose as many (vllm-ascend's P/D tutorial)")
        elif not hybrid and n != 1:
            yield Problem(path, f"prefill proposes {n} speculative tokens: in P/D the prefill proposes 1 and decode "
                                f"1 or more (vllm-ascend's P/D tutorial)", hint="num_speculative_tokens: 1 on prefill")


def _draft_model(c: Context) -> Iterator[Problem]:
    """A drafter that is a model of its own needs `model` (vLLM 0.33.0 vllm/config/speculative.py:1252-1295: only
    the MTP family, dspark, ngram, suffix and extract_hidden_states find theirs), and the container sees only the
    weights' directory of the host's (servers/vllm_ascend/upstream.py mounts weights.dest)."""
    dest = c.value(("weights", "dest"), str)
    for unit in c.groups:
        spec = c.value(unit.path + ("speculative",), dict)
        if spec is None:
            continue
        method, model = spec.get("method"), spec.get("model")
        if method in DRAFT_METHODS and model is None:
            yield Problem(unit.path + ("speculative",),
                          f"method {method} needs its draft model: vLLM refuses to start with 'num_speculative_tokens "
                          f"was provided but without speculative model' (vllm/config/speculative.py:1294, vLLM 0.33.0)",
                          hint=f"add model: the draft's directory under {dest or 'weights.dest'} (the one host "
                               f"directory the container mounts), e.g. {(dest or '/mnt/weights/model').rstrip('/')}/"
                               f"{method}")
        elif isinstance(model, str) and model.startswith("/") and dest and not _under(model, dest):
            yield Problem(unit.path + ("speculative", "model"),
                          f"{model} is not inside the container: only weights.dest ({dest}) of the host's directories "
                          f"is mounted into it", hint=f"put the draft model under {dest} and name it there")


def _under(path: str, directory: str) -> bool:
    parts, base = [p for p in path.split("/") if p], [p for p in directory.split("/") if p]
    return parts[:len(base)] == base


def _flags(c: Context, unit: Unit) -> list[str]:
    """The flags a group's servers get through extra_args: the model's, then the group's."""
    words = (c.value(("model", "extra_args"), list) or []) + (c.value(unit.path + ("model", "extra_args"), list) or [])
    return [w.split("=", 1)[0] if isinstance(w, str) else "" for w in words]


def _flag_value(c: Context, unit: Unit, flags: tuple[str, ...]) -> Optional[str]:
    words = (c.value(("model", "extra_args"), list) or []) + (c.value(unit.path + ("model", "extra_args"), list) or [])
    return flag_value(words, flags)


def _context_parallel(c: Context, prefill: list, decode: list) -> Iterator[Problem]:
    """Prefill and decode groups agree on the context-parallel sizes (vllm-ascend #14322): the connector maps
    each prefill rank's KV blocks onto the decode ranks by them."""
    if not prefill:
        return
    first = prefill[0]
    for role in ("prefill", "decode"):
        flags = tuple(f for f, r in _CP_FLAGS.items() if r == role)
        values = {id(u): _flag_value(c, u, flags) or "1" for u in prefill + decode}
        for unit in decode:
            if values[id(unit)] != values[id(first)]:
                yield Problem(unit.path + ("model", "extra_args"),
                              f"{role} context-parallel size {values[id(unit)]} here but {values[id(first)]} in "
                              f"{_named(first)}: prefill and decode must agree (vllm-ascend #14322)",
                              hint=f"pass the same {flags[0]} to both roles")


def _servers_devices(c: Context, unit: Unit) -> Optional[int]:
    """The NPUs one container of a group mounts: tp x its local ranks (external launch: one rank)."""
    dp, tp = c.value(unit.path + ("dp",), int), c.value(unit.path + ("tp",), int)
    hosts = c.value(unit.path + ("hosts",), list)
    if dp is None or tp is None or not hosts or dp % len(hosts):
        return None
    launch = c.value(("topology", "dp_launch"), str) or "internal"
    return tp * (1 if launch == "external" else dp // len(hosts))


def _visible_devices(c: Context) -> Iterator[Problem]:
    """A container mounts exactly its own NPUs and the runtime numbers them 0..n-1: a written value must name
    those. The evidence for leaving it unset is CANN's numbering of the mounted devices and reports such as
    vllm-ascend #2238 (two containers, each mounting four of eight NPUs); PR #12959, once cited here, was closed
    unmerged and concerned A5 endpoint files only (contract: "Settled on 2026-11-28")."""
    spec_value = c.value(("env", VISIBLE), (str, int))
    for unit in c.groups:
        own = c.value(unit.path + ("env", VISIBLE), (str, int))
        value, path = (own, unit.path + ("env", VISIBLE)) if own is not None else (spec_value, ("env", VISIBLE))
        count = _servers_devices(c, unit)
        if value is None or count is None:
            continue
        words = str(value).replace(" ", "").split(",")
        ids = [int(w) for w in words if w.isdigit()]
        if len(ids) == len(words) and sorted(ids) == list(range(count)):
            continue
        shown = c.references.get(path, value)  # a ${VAR} is named, never its value
        yield Problem(path, f"{VISIBLE}={shown} but each container of {_named(unit)} mounts exactly its own {count} "
                            f"NPU(s), which the runtime numbers 0-{count - 1}: host ids never go in this variable",
                      hint="leave it unset: deployctl mounts exactly each server's devices, which CANN numbers from 0 "
                           "(reports such as vllm-ascend #2238)")


def _kv_port_range(c: Context) -> Iterator[Problem]:
    """A written kv_port whose ports fall in Mooncake's random range fails now and then with "Address already
    in use" (vllm-ascend #6455, #8938). validate reads the NPUs per host from requirements.cards."""
    start, end = connector_port_range(c.cards)
    for unit in c.groups:
        base = c.value(unit.path + ("kv_port",), int)
        dp, tp, hosts = (c.value(unit.path + (k,), t) for k, t in (("dp", int), ("tp", int), ("hosts", list)))
        if base is None:
            continue
        used = (dp // len(hosts)) * tp if dp and tp and hosts and dp % len(hosts) == 0 else 1
        if base < end and base + used > start:
            yield Problem(unit.path + ("kv_port",),
                          f"kv_port {base} lies inside Mooncake's random port range {start}-{end - 1} on "
                          f"{c.cards}-NPU hosts (validate assumes requirements.cards: {c.cards}): it fails now and "
                          f"then with 'Address already in use' (vllm-ascend #6455, #8938)",
                          severity="warning", hint=f"use {end} or more, or leave kv_port out (default {end})")
