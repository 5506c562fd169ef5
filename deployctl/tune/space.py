"""The search space (pure): axes (the layout, max_num_seqs, max_num_batched_tokens, the user's `--search` keys),
candidates as overrides of the spec's own data, their spec text, and pruning by the rules `validate` applies."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from deployctl.errors import UsageError

SEQS = "model.max_num_seqs"
BATCHED = "model.max_num_batched_tokens"
LAYOUT = "layout"
SHORT_KEYS = {"max_num_seqs": SEQS, "max_num_batched_tokens": BATCHED}
LAYOUT_KEYS = ("tp", "dp")  # `--search tp=1,2` / `dp=...` narrow the layout axis rather than set a key
# a string written plain only where YAML 1.2's core schema (spec/yaml12.py) reads it back as the same text
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./@+-]*\Z")
_WORDS = re.compile(r"(?:null|Null|NULL|true|True|TRUE|false|False|FALSE)\Z")


@dataclass(frozen=True, order=True)
class Layout:
    """Per serving role (mixed, or prefill and decode): (tp, dp); cards is what the layout occupies."""

    roles: tuple[tuple[str, int, int], ...]  # (role, tp, dp)

    @property
    def cards(self) -> int:
        return sum(tp * dp for _, tp, dp in self.roles)

    @property
    def label(self) -> str:
        if len(self.roles) == 1:
            return f"tp{self.roles[0][1]}-dp{self.roles[0][2]}"
        return "-".join(f"{role[0]}{tp}x{dp}" for role, tp, dp in self.roles)  # p2x1-d2x2

    def to_json(self) -> dict:
        return {role: {"tp": tp, "dp": dp} for role, tp, dp in self.roles}


@dataclass(frozen=True)
class Axis:
    key: str  # LAYOUT or a dotted spec path
    values: tuple  # in order (ascending for numbers)


@dataclass(frozen=True)
class Candidate:
    values: tuple[tuple[str, Any], ...]  # (axis key, value) in axis order

    def get(self, key: str):
        return dict(self.values).get(key)

    @property
    def layout(self) -> Optional[Layout]:
        return self.get(LAYOUT)

    @property
    def label(self) -> str:
        words = []
        for key, value in self.values:
            if key == LAYOUT:
                words.append(value.label)
            else:
                short = {SEQS: "seqs", BATCHED: "bt"}.get(key, key.rsplit(".", 1)[-1])
                words.append(f"{short}{value}")
        return "-".join(words) or "original"

    def to_json(self) -> dict:
        return {key: (value.to_json() if isinstance(value, Layout) else value) for key, value in self.values}


@dataclass(frozen=True)
class Pruned:
    candidate: Candidate
    reason: str  # the first error validate gives, with its spec path


@dataclass
class Space:
    """What tune may try: axes, every valid candidate (with its spec text), the pruned ones, the spec's own point."""

    axes: tuple[Axis, ...]
    texts: dict = field(default_factory=dict)  # Candidate -> spec text (valid ones only)
    cards: dict = field(default_factory=dict)  # Candidate -> cards its layout occupies
    pruned: list = field(default_factory=list)
    original: Optional[Candidate] = None  # the spec's own values (or the nearest listed), when valid

    @property
    def valid(self) -> list[Candidate]:
        return list(self.texts)


def parse_search(words: Sequence[str]) -> dict[str, tuple]:
    """`--search KEY=V1,V2` (repeatable) to {key: values}; numbers as numbers, `true`/`false`/`null` as JSON."""
    out: dict[str, tuple] = {}
    for word in words:
        key, sep, text = word.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise UsageError(f"--search {word!r}: expected KEY=V1,V2,... (e.g. max_num_seqs=64,128,256)")
        key = SHORT_KEYS.get(key, key)
        if key in out:
            raise UsageError(f"--search {key}: given twice")
        values = tuple(dict.fromkeys(_value(v.strip()) for v in text.split(",") if v.strip()))
        if key in LAYOUT_KEYS and not all(isinstance(v, int) and v >= 1 for v in values):
            raise UsageError(f"--search {word!r}: {key} takes whole numbers from 1")
        out[key] = values
    return out


def _value(text: str):
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (int, float, bool, str)) or value is None else text


def get_path(data, key: str):
    node = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def set_path(data: dict, key: str, value) -> None:
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def serving_roles(data: dict) -> tuple[str, ...]:
    """The roles whose layout tune varies, or () where it cannot (a disaggregated AscendCloud spec: the
    ranktables tie each instance to devices; its model keys are still searched)."""
    topology = data.get("topology") or {}
    if topology.get("mode") == "disaggregated":
        return ("prefill", "decode") if _dp_groups(data) else ()
    return ("mixed",)


def _dp_groups(data: dict) -> bool:
    """The topology is written as data-parallel groups (`groups`, or prefill/decode entries with `hosts`), the
    shape of the flavours whose topology is DP groups (servers/base.py dp_groups), not instances."""
    topology = data.get("topology") or {}
    entries = list(topology.get("prefill") or []) + list(topology.get("decode") or [])
    return bool(topology.get("groups")) or any(isinstance(e, dict) and "hosts" in e for e in entries)


def own_layout(data: dict) -> Optional[Layout]:
    """The spec's layout as (tp, dp) per role; None where its instances do not share one tp."""
    topology = data.get("topology") or {}
    roles = []
    for role in serving_roles(data):
        if _dp_groups(data):
            groups = topology.get("groups" if role == "mixed" else role) or []
            if not groups:
                return None
            tps = {g.get("tp", 1) for g in groups}
            dp = sum(int(g.get("dp", 1)) for g in groups)
        else:
            instances = topology.get("instances") or []
            if not instances:
                return None
            tps = {len(i.get("devices") or ()) for i in instances}
            dp = len(instances)
        if len(tps) != 1:
            return None
        roles.append((role, int(tps.pop()), dp))
    return Layout(tuple(roles)) if roles else None


def layouts(data: dict, cards: Mapping[str, int], tps=None, dps=None) -> list[Layout]:
    """Every (tp, dp) per role that fits the hosts that role serves on: tp a power of two up to a host's cards, dp
    up to what those hosts hold at that tp; for P/D both roles together within the cards of all their hosts (a
    role's group keeps its hosts, so prefill on one host and decode on two split the cards that way); the rules
    prune the rest."""
    roles = serving_roles(data)
    hosts = serving_hosts(data)
    if not roles or not hosts:
        return []
    total = min(cards.get(h, 0) for h in hosts) * len(hosts)
    per_role = []
    for role in roles:
        mine = _role_hosts(data, role) or hosts
        per_host = min(cards.get(h, 0) for h in mine)
        tp_values = [t for t in (1, 2, 4, 8, 16) if t <= per_host and (not tps or t in tps)]
        per_role.append([(t, d) for t in tp_values for d in range(1, per_host * len(mine) // t + 1)
                         if not dps or d in dps])
    out = []
    for combo in itertools.product(*per_role):
        layout = Layout(tuple((role, t, d) for role, (t, d) in zip(roles, combo)))
        if layout.cards <= total:
            out.append(layout)
    return sorted(out, key=lambda layout: (layout.cards, layout.roles))


def _role_hosts(data: dict, role: str) -> list[str]:
    """The hosts a role's DP groups name (the groups of a mixed spec); [] for a topology of instances."""
    if not _dp_groups(data):
        return []
    hosts: list[str] = []
    for group in (data.get("topology") or {}).get("groups" if role == "mixed" else role) or []:
        hosts += [h for h in group.get("hosts") or [] if isinstance(h, str) and h not in hosts]
    return hosts


def serving_hosts(data: dict) -> list[str]:
    """The hosts whose cards the layouts use, in the spec's order."""
    topology = data.get("topology") or {}
    hosts: list[str] = []
    if _dp_groups(data):
        for role in ("groups", "prefill", "decode"):
            for group in topology.get(role) or []:
                hosts += [h for h in group.get("hosts") or [] if h not in hosts]
    else:
        hosts += [i.get("host") for i in topology.get("instances") or [] if i.get("host") not in hosts]
    return [h for h in hosts if isinstance(h, str)]


def apply_layout(data: dict, layout: Layout, cards: Mapping[str, int]) -> None:
    """Rewrite the topology for `layout`: AscendCloud mixed instances fill the hosts in order (devices from 0,
    ports from the first instance's up); vllm-ascend groups take tp and dp (one group per role keeps the first)."""
    topology = data["topology"]
    hosts = serving_hosts(data)
    if _dp_groups(data):
        for role, tp, dp in layout.roles:
            key = "groups" if role == "mixed" else role
            first = dict(topology[key][0])
            first.update(tp=tp, dp=dp)
            topology[key] = [first]
        return
    (_, tp, dp), = layout.roles
    template = dict(topology["instances"][0])
    port = int(template.get("port", 8080))
    instances, placed = [], {h: 0 for h in hosts}
    for host in itertools.cycle(hosts):
        if len(instances) == dp:
            break
        k = placed[host]
        if (k + 1) * tp > cards.get(host, 0):
            if all((placed[h] + 1) * tp > cards.get(h, 0) for h in hosts):
                break  # does not fit: the rules say so below (devices or count)
            continue
        entry = {**template, "host": host, "devices": list(range(k * tp, (k + 1) * tp)), "port": port + k}
        instances.append(entry)
        placed[host] = k + 1
    topology["instances"] = instances


def default_values(data: dict, key: str) -> tuple:
    """Without a `--search` list: max_num_seqs halved, as written and doubled; max_num_batched_tokens as written
    and doubled; any other key only as written."""
    own = get_path(data, key)
    if key == SEQS:
        own = own or 256  # vLLM's default
        return tuple(sorted({max(1, own // 2), own, own * 2}))
    if key == BATCHED and own:
        return (own, own * 2)
    return (own,) if own is not None else ()


def build_space(data: dict, references: Mapping[tuple, str], cards: Mapping[str, int],
                search: Mapping[str, tuple], check: Callable[[str], Optional[str]]) -> Space:
    """Every candidate of the grid with its spec text, or pruned with the reason `check(text)` gives."""
    model_keys = [SEQS, BATCHED] + [k for k in search if k not in (SEQS, BATCHED, *LAYOUT_KEYS)]
    axes = []
    all_layouts = layouts(data, cards, search.get("tp"), search.get("dp"))
    if all_layouts:
        axes.append(Axis(LAYOUT, tuple(all_layouts)))
    elif any(k in search for k in LAYOUT_KEYS):
        raise UsageError("--search tp/dp: this spec's layout is not searched (an AscendCloud disaggregated "
                         "spec ties instances to ranktable devices): search its model keys")
    for key in model_keys:
        values = search.get(key) or default_values(data, key)
        if values:
            axes.append(Axis(key, tuple(sorted(values, key=_order)) if key != LAYOUT else values))
    space = Space(tuple(axes))
    for combo in itertools.product(*(axis.values for axis in axes)):
        candidate = Candidate(tuple((axis.key, value) for axis, value in zip(axes, combo)))
        text = candidate_text(data, references, candidate, cards)
        problem = check(text)
        if problem is None:
            space.texts[candidate] = text
            space.cards[candidate] = candidate.layout.cards if candidate.layout else _own_cards(data)
        else:
            space.pruned.append(Pruned(candidate, problem))
    space.original = _original(data, space)
    return space


def _order(value):
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


def _own_cards(data: dict) -> int:
    topology = data.get("topology") or {}
    return sum(len(i.get("devices") or ()) for role in ("instances", "prefill", "decode")
               for i in topology.get(role) or [] if isinstance(i, dict))


def _original(data: dict, space: Space) -> Optional[Candidate]:
    """The spec's own point: on each axis its own value, else the listed value nearest to it."""
    own = own_layout(data)
    values = []
    for axis in space.axes:
        mine = own if axis.key == LAYOUT else get_path(data, axis.key)
        values.append((axis.key, _nearest(axis, mine)))
    candidate = Candidate(tuple(values))
    return candidate if candidate in space.texts else None


def _nearest(axis: Axis, mine):
    if mine in axis.values or mine is None:
        return mine if mine in axis.values else axis.values[0]
    if axis.key == LAYOUT:
        return min(axis.values, key=lambda layout: (abs(layout.cards - mine.cards), layout.roles))
    if isinstance(mine, (int, float)) and all(isinstance(v, (int, float)) for v in axis.values):
        return min(axis.values, key=lambda v: (abs(v - mine), v))
    return axis.values[0]


def candidate_data(data: dict, candidate: Candidate, cards: Mapping[str, int]) -> dict:
    out = copy.deepcopy(data)
    for key, value in candidate.values:
        if key == LAYOUT:
            apply_layout(out, value, cards)
        else:
            set_path(out, key, value)
    return out


def candidate_text(data: dict, references: Mapping[tuple, str], candidate: Candidate,
                   cards: Mapping[str, int]) -> str:
    return spec_text(candidate_data(data, candidate, cards), references)


def spec_text(data: dict, references: Mapping[tuple, str]) -> str:
    """YAML for the data, with every `${VAR}` written back as the user wrote it (the resolved value, a secret, never
    reaches the file); a literal `${` elsewhere is escaped as `$${`."""
    import yaml

    raw = _unresolved(data, references, ())

    class Dumper(yaml.SafeDumper):
        pass

    def text_scalar(dumper, value: str):
        style = None if _PLAIN.match(value) and not _WORDS.match(value) else '"'
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text_scalar)
    return yaml.dump(raw, Dumper=Dumper, sort_keys=False, default_flow_style=None, allow_unicode=True, width=120)


def _unresolved(node, references: Mapping[tuple, str], path: tuple):
    if path in references:
        return references[path]
    if isinstance(node, dict):
        return {key: _unresolved(value, references, path + (key,)) for key, value in node.items()}
    if isinstance(node, list):
        return [_unresolved(value, references, path + (i,)) for i, value in enumerate(node)]
    if isinstance(node, str):
        return node.replace("${", "$${")
    return node


def inputs_digest(text: str, settings: Mapping[str, Any]) -> str:
    """What makes a measurement reusable: the candidate's spec text and the bench's settings (SLOs included)."""
    blob = json.dumps({"spec": text, "settings": settings}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def rules_check(filename: str, base_dir, environ: Mapping[str, str]) -> Callable[[str], Optional[str]]:
    """check(text) -> None for a spec `validate` accepts, else its first error as `path: message`."""
    from deployctl.spec.load import check_spec_text

    def check(text: str) -> Optional[str]:
        _, errors, _ = check_spec_text(text, filename, base_dir, environ)
        return None if not errors else f"{errors[0].dotted_path}: {errors[0].message}"

    return check
