"""vllm-ascend server profiles (deployctl/data/server_profiles.json) and which one a spec runs with (pure).

What `server: vllm-ascend` renders depends on its release line: the connector settings, the keys it removed, the
library paths Mooncake needs, the default env and flags per role, the shm size (contract: "Settled on
2026-11-25", server profiles). The version comes, strongest first, from the spec's `server_version:`, from the
image itself (probed once per image digest), from the image tag (the offline hint), else the newest profile with
a warning naming it."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional

# `0.13`, `v0.13.0rc1`, `0.11.0.post1`; an image tag may carry a suffix (`v0.13.0rc1-a3`, `v0.23.0-openeuler`)
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:(rc|\.post|post)(\d+))?")
VERSION_PATTERN = r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?((rc|\.post)[0-9]+)?$"  # what `server_version:` accepts
_RELEASE_KIND = {"rc": 0, None: 1, ".post": 2, "post": 2}  # rc1 < the release < .post1

SOURCE_OVERRIDE, SOURCE_PROBED, SOURCE_TAG, SOURCE_DEFAULT = "server_version", "probed", "image tag", "default"


@dataclass(frozen=True, order=True)
class Version:
    """A vllm-ascend version as compared: (major, minor, micro, rc < release < post, number)."""

    major: int
    minor: int
    micro: int = 0
    kind: int = 1
    number: int = 0

    @property
    def line(self) -> tuple[int, int]:
        return self.major, self.minor


def parse_version(text: str, *, prefix: bool = False) -> Optional[Version]:
    """The version a text names (the whole text; `prefix`: at its start, as in an image tag), or None."""
    match = (_VERSION.match if prefix else _VERSION.fullmatch)(text.strip())
    if match is None:
        return None
    major, minor, micro, kind, number = match.groups()
    return Version(int(major), int(minor), int(micro or 0), _RELEASE_KIND[kind], int(number or 0))


def image_tag(image: str) -> Optional[str]:
    """The tag of an image reference (`quay.io/ascend/vllm-ascend:v0.13.0rc1-a3` -> `v0.13.0rc1-a3`)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def version_from_image(image: Optional[str]) -> Optional[tuple[str, Version]]:
    """(tag, version) when an image's tag starts with a version, else None (`latest`, `main`, no tag)."""
    tag = image_tag(image or "")
    version = parse_version(tag, prefix=True) if tag else None
    return (tag, version) if version is not None else None


@dataclass(frozen=True)
class ServerProfile:
    """One row of server_profiles.json: what one vllm-ascend release line renders and needs."""

    line: str
    releases: str
    vllm: str
    mooncake_from: Optional[str]
    kv_connector: str
    connector_module: str
    kv_connector_module_path: Optional[str]  # None: the connector is registered, the key stays out
    removed_additional_config: Mapping[str, str]  # key -> why (the upstream change that removed it)
    renamed_additional_config: Mapping[str, str]  # old key -> new key
    set_env: tuple[str, ...]  # the image's set-up scripts the server's shell sources, where present
    library_path: tuple[str, ...]  # put before the image's LD_LIBRARY_PATH (Mooncake's libraries among them)
    # the image's LD_PRELOAD (jemalloc), set in ~/.bashrc only: the first of these paths that exists is carried,
    # from release `preload_from` on (None: the line's images preload nothing)
    preload: tuple[str, ...]
    preload_from: Optional[str]
    env: Mapping[str, Mapping[str, str]]  # role -> default env
    flags: Mapping[str, tuple[str, ...]]  # role -> default `vllm serve` flags
    shm_size: str
    start_rank_on_head_is_hybrid_lb: bool
    # the first release whose P/D proxy example serves POST /instances/add|remove (None: none in this line), so
    # whether a front of kind proxy can change its list while serving (older proxies answer 404)
    proxy_instances_api_from: Optional[str]
    # the first release whose vLLM takes `vllm serve --shutdown-timeout` (None: none in this line)
    shutdown_timeout_from: Optional[str]
    requires: Mapping[str, Optional[str]]  # cann, torch, torch_npu, python, driver
    sources: Mapping[str, str]
    startup: Optional["StartupProfile"] = None  # its log lines for the time-to-serve ledger, its compile caches
    # first release -> the vLLM its tags pair with from there on (a line spans several vLLM releases)
    vllm_pairs: Mapping[str, str] = field(default_factory=dict)
    # first release -> the connector's module from there on, where it moved inside the line (#5719)
    module_by_release: Mapping[str, str] = field(default_factory=dict)
    # MooncakeHybridConnector: its name, the first release that registers it (None: the line has none), and the
    # first release whose MooncakeConnectorV1 carries DeepSeek-V4's KV groups too (vllm-ascend #10342)
    hybrid_connector: Optional[str] = None
    hybrid_connector_from: Optional[str] = None
    v1_runs_deepseek_v4_from: Optional[str] = None

    @property
    def first(self) -> Version:
        """The first release of the line (`v0.12.0rc1 - v0.14.0rc1` -> 0.12.0rc1)."""
        return parse_version(self.releases.split()[0])

    def has_mooncake(self, version: Optional[Version]) -> bool:
        """Whether the image of this version carries Mooncake (unknown version: assume the line's last does)."""
        if self.mooncake_from is None:
            return False
        return version is None or version >= parse_version(self.mooncake_from)

    def has_proxy_instances_api(self, version: Optional[Version]) -> bool:
        """Whether this version's proxy can add and remove instances at run time (unknown version: the line's last)."""
        if self.proxy_instances_api_from is None:
            return False
        return version is None or version >= parse_version(self.proxy_instances_api_from)

    def preload_for(self, version: Optional[Version]) -> tuple[str, ...]:
        """The LD_PRELOAD candidates this version's image relies on (unknown version: the line's last)."""
        if self.preload_from is None or not _from(self.preload_from, version):
            return ()
        return self.preload

    def vllm_for(self, version: Optional[Version]) -> str:
        """The vLLM this version's image is built on (unknown version: the line's last, `vllm`)."""
        return _by_release(self.vllm_pairs, version) or self.vllm

    def has_hybrid_connector(self, version: Optional[Version]) -> bool:
        """Whether this version registers MooncakeHybridConnector (unknown version: the line's last does)."""
        return self.hybrid_connector_from is not None and _from(self.hybrid_connector_from, version)

    def v1_runs_deepseek_v4(self, version: Optional[Version]) -> bool:
        """Whether this version's MooncakeConnectorV1 moves DeepSeek-V4's compressed and sliding-window KV."""
        return self.v1_runs_deepseek_v4_from is not None and _from(self.v1_runs_deepseek_v4_from, version)

    def connector_module_for(self, version: Optional[Version]) -> str:
        return _by_release(self.module_by_release, version) or self.connector_module

    @property
    def vllm_range(self) -> str:
        """`0.12.0 - 0.14.1`: every vLLM the line's tags pair with (one where there is one)."""
        paired = list(self.vllm_pairs.values()) or [self.vllm]
        return paired[0] if len(set(paired)) == 1 else f"{paired[0]} - {paired[-1]}"

    @property
    def last(self) -> Optional[Version]:
        """The newest release of the line this table knows (`v0.12.0rc1 - v0.14.0rc1` -> 0.14.0rc1)."""
        return parse_version(self.releases.split()[-1])

    def has_shutdown_timeout(self, version: Optional[Version]) -> bool:
        """Whether this version's vLLM takes --shutdown-timeout (unknown version: the line's last)."""
        if self.shutdown_timeout_from is None:
            return False
        return version is None or version >= parse_version(self.shutdown_timeout_from)

    def flags_for(self, role: str) -> tuple[str, ...]:
        return self.flags.get(role, ())

    def env_for(self, role: str) -> Mapping[str, str]:
        return self.env.get(role, {})

    def describe(self) -> str:
        return f"vllm-ascend {self.line} ({self.releases}; vLLM {self.vllm_range})"


def _from(first: str, version: Optional[Version]) -> bool:
    return version is None or version >= parse_version(first)


def _by_release(table: Mapping[str, str], version: Optional[Version]) -> Optional[str]:
    """The value of the newest entry at or before `version` (None: no table; unknown version: the last entry)."""
    found = None
    for first, value in sorted(table.items(), key=lambda item: parse_version(item[0])):
        if _from(first, version):
            found = value
    return found


def parse_profiles(text: str) -> tuple[ServerProfile, ...]:
    """The rows of server_profiles.json, oldest line first (pure; `profiles()` reads the packaged file)."""
    rows = []
    for row in json.loads(text)["vllm_ascend"]:
        connector = row["connector"]
        rows.append(ServerProfile(
            line=row["line"], releases=row["releases"], vllm=row["vllm"], mooncake_from=row.get("mooncake_from"),
            kv_connector=connector["kv_connector"], connector_module=connector["module"],
            kv_connector_module_path=connector.get("kv_connector_module_path"),
            module_by_release=dict(connector.get("module_by_release", {})),
            hybrid_connector=(connector.get("hybrid") or {}).get("kv_connector"),
            hybrid_connector_from=(connector.get("hybrid") or {}).get("from"),
            v1_runs_deepseek_v4_from=(connector.get("hybrid") or {}).get("v1_runs_deepseek_v4_from"),
            vllm_pairs=dict(row.get("vllm_pairs", {})),
            preload=tuple(row.get("preload", {}).get("paths", ())), preload_from=row.get("preload", {}).get("from"),
            removed_additional_config=dict(row.get("removed_additional_config", {})),
            renamed_additional_config=dict(row.get("renamed_additional_config", {})),
            set_env=tuple(row.get("set_env", ())), library_path=tuple(row.get("library_path", ())),
            env={role: dict(values) for role, values in row.get("env", {}).items()},
            flags={role: tuple(values) for role, values in row.get("flags", {}).items()},
            shm_size=row["shm_size"], start_rank_on_head_is_hybrid_lb=bool(row["start_rank_on_head_is_hybrid_lb"]),
            proxy_instances_api_from=row.get("proxy_instances_api_from"),
            shutdown_timeout_from=row.get("shutdown_timeout_from"),
            requires=dict(row.get("requires", {})), sources=dict(row.get("sources", {})),
            startup=_startup(row),
        ))
    return tuple(sorted(rows, key=lambda r: r.first))


# The phases a server's own log ends, in the order they happen (facts/startup_log.py reads them)
LOG_PHASES = ("weights_loaded", "graph_compiled", "server_ready")


@dataclass(frozen=True)
class StartupProfile:
    """What a server prints as it starts (phase -> regexes searched in each log line) and where its compile
    caches live (env var -> value; `{dir}` is the cache directory as the container sees it)."""

    log: Mapping[str, tuple[str, ...]]
    cache_env: Mapping[str, str]


def _startup(row: Mapping) -> Optional[StartupProfile]:
    if "startup_log" not in row:
        return None
    log = {phase: tuple(row["startup_log"].get(phase, ())) for phase in LOG_PHASES}
    return StartupProfile(log, dict(row.get("compile_cache", {}).get("env", {})))


def parse_vllm_startup(text: str) -> StartupProfile:
    """The `vllm` row of server_profiles.json: vLLM's OpenAI server itself (pure)."""
    return _startup(json.loads(text)["vllm"])


@functools.lru_cache(maxsize=1)
def vllm_startup() -> StartupProfile:
    """vLLM's own log lines and compile caches (server vllm on GPU hosts, AscendCloud's fork)."""
    from importlib import resources

    return parse_vllm_startup(resources.files("deployctl").joinpath("data/server_profiles.json").read_text("utf-8"))


def parse_vllm_shutdown_timeout_from(text: str) -> Optional[Version]:
    """The first vLLM whose `vllm serve` takes --shutdown-timeout, from server_profiles.json's `vllm` row (pure)."""
    first = json.loads(text)["vllm"].get("shutdown_timeout_from")
    return parse_version(first) if first else None


@functools.lru_cache(maxsize=1)
def vllm_shutdown_timeout_from() -> Optional[Version]:
    """The first vLLM with `--shutdown-timeout` (server vllm on GPU hosts reads its image's version against it)."""
    from importlib import resources

    return parse_vllm_shutdown_timeout_from(
        resources.files("deployctl").joinpath("data/server_profiles.json").read_text("utf-8"))


@functools.lru_cache(maxsize=1)
def profiles() -> tuple[ServerProfile, ...]:
    """The packaged table, read once per process (only specs with server vllm-ascend ask for it)."""
    from importlib import resources

    return parse_profiles(resources.files("deployctl").joinpath("data/server_profiles.json").read_text("utf-8"))


def newest(rows: Optional[tuple[ServerProfile, ...]] = None) -> ServerProfile:
    return (rows or profiles())[-1]


def profile_for(version: Version, rows: Optional[tuple[ServerProfile, ...]] = None) -> tuple[ServerProfile, str]:
    """The line a version belongs to, and a note when it lies outside the releases the table names ("" otherwise):
    a release newer than the newest named is one nobody has checked here, never silently the newest line's."""
    rows = rows or profiles()
    known = [row for row in rows if row.first.line <= version.line]
    if not known or version < rows[0].first:
        return rows[0], f"older than every profile; the oldest ({rows[0].line}) applies"
    row = known[-1]
    last = row.last or row.first
    if version > last:
        newest = "every release the profiles name" if row is rows[-1] else f"every release of the {row.line} line"
        return row, f"newer than {newest} (the newest is v{_shown(last)}); the {row.line} profile applies unchecked"
    return row, ""


def _shown(version: Version) -> str:
    kind = {0: "rc", 1: "", 2: ".post"}[version.kind]
    return f"{version.major}.{version.minor}.{version.micro}{kind}{version.number if version.kind != 1 else ''}"


@dataclass(frozen=True)
class ProfileChoice:
    """The profile a deployment renders with, and why: `source` is server_version, probed, image tag or
    default; `version` the version read (None for the default)."""

    profile: ServerProfile
    source: str
    version: Optional[Version] = None
    shown: str = ""  # the version text as written (`v0.13.0rc1-a3`)
    note: str = ""  # outside the table's lines

    @property
    def has_mooncake(self) -> bool:
        return self.profile.has_mooncake(self.version)

    @property
    def has_proxy_instances_api(self) -> bool:
        """Whether the P/D proxy of this version serves /instances/add|remove (a front that can change its list)."""
        return self.profile.has_proxy_instances_api(self.version)

    @property
    def has_shutdown_timeout(self) -> bool:
        """Whether this version's vLLM takes `vllm serve --shutdown-timeout` (a graceful stop that drains)."""
        return self.profile.has_shutdown_timeout(self.version)

    @property
    def vllm(self) -> str:
        """The vLLM under this version (`v0.14.0rc1` -> 0.14.1; unknown: the line's last)."""
        return self.profile.vllm_for(self.version)

    @property
    def preload(self) -> tuple[str, ...]:
        return self.profile.preload_for(self.version)

    @property
    def warning(self) -> Optional[str]:
        """Said when deployctl guesses: an unknown version, or one outside the table."""
        if self.source == SOURCE_DEFAULT:
            return (f"the vllm-ascend version is unknown (no server_version, and the image tag names none): "
                    f"the newest profile, {self.profile.describe()}, applies")
        if self.note:
            return f"vllm-ascend {self.shown} ({self.source}) is {self.note}"
        return None

    def describe(self) -> str:
        """`profile vllm-ascend 0.13 (...), from the image tag v0.13.0rc1-a3`: what `plan`/`validate` print."""
        why = {SOURCE_OVERRIDE: f"from server_version {self.shown}",
               SOURCE_PROBED: f"probed in the image: {self.shown}",
               SOURCE_TAG: f"from the image tag {self.shown}", SOURCE_DEFAULT: "by default (version unknown)"}
        line = self.profile.describe()
        if self.version is not None and self.profile.vllm_range != self.vllm:  # a line spans several vLLM releases
            line = line[:-1] + f": {self.vllm} here)"
        return f"server profile {line}, {why[self.source]}"


def select_profile(server_version: Optional[str] = None, image: Optional[str] = None,
                   probed: Optional[str] = None, rows: Optional[tuple[ServerProfile, ...]] = None) -> ProfileChoice:
    """server_version overrides; else the version probed in the image; else the image tag; else the newest."""
    rows = rows or profiles()
    for source, text, prefix in ((SOURCE_OVERRIDE, server_version, False), (SOURCE_PROBED, probed, False)):
        version = parse_version(text, prefix=prefix) if text else None
        if version is not None:
            profile, note = profile_for(version, rows)
            return ProfileChoice(profile, source, version, text.strip(), note)
    tagged = version_from_image(image)
    if tagged is not None:
        tag, version = tagged
        profile, note = profile_for(version, rows)
        return ProfileChoice(profile, SOURCE_TAG, version, tag, note)
    return ProfileChoice(newest(rows), SOURCE_DEFAULT)
