"""What `deployctl diagnose` asks each host, as data: a pure function of the spec. Every command is argv words;
the scripts are constants and every value reaches them as an argument. Items whose answer holds several files
(containers, plogs, the state directory) frame each file with a marker line that the caller picks per run."""

from __future__ import annotations

from dataclasses import dataclass

from deployctl.core import Command
from deployctl.plan.containers import LABEL_DEPLOYMENT
from deployctl.spec.model import Spec

PLOG_DIRS = ("/root/ascend/log", "/var/log/npu")
PLOG_FILES = 8  # the newest few plog/slog files, the tail of each
DAEMON_DOWN = 97  # the containers script's exit status when `docker ps` cannot reach the daemon
STATE_FILE_BYTES = 1 << 20  # a state file larger than this is cut

# args: label filter, lines, marker. Per container (any state, `.previous` ones too): inspect, stdout, stderr.
CONTAINERS_SCRIPT = (
    't=$(mktemp) || exit 1; '
    f'names=$(docker ps --all --filter "label=$1" --format "{{{{.Names}}}}") || {{ rm -f "$t"; exit {DAEMON_DOWN}; }}; '
    'for c in $names; do '
    'echo "@@$3 inspect $c"; docker inspect "$c"; echo; '
    'echo "@@$3 stdout $c"; docker logs --timestamps --tail "$2" "$c" 2>"$t"; echo; '
    'echo "@@$3 stderr $c"; cat "$t"; echo; '
    'done; rm -f "$t"'
)
# args: files, lines, marker, directories...: the newest files under the directories, the tail of each.
PLOG_SCRIPT = (
    'k=$1; n=$2; m=$3; shift 3; '
    'for d in "$@"; do [ -d "$d" ] && find "$d" -type f -printf "%T@ %p\\n" 2>/dev/null; done '
    '| sort -rn | head -n "$k" | cut -d" " -f2- | '
    'while IFS= read -r f; do echo "@@$m file $f"; tail -n "$n" -- "$f"; echo; done; true'
)
# args: the remote state directory, marker, byte limit. Every file deployctl wrote there (ranktables, model
# repositories, history, the lock's holder) except programs; of an env file only the variable names leave the host.
STATE_SCRIPT = (
    'd=$1; m=$2; [ -d "$d" ] || exit 0; '
    'find "$d" -type f ! -name "*.py" ! -name ".lock-guard" ! -name "*.deployctl-partial" | sort | '
    'while IFS= read -r f; do case "$f" in '
    '"$d"/env/*) echo "@@$m names $f"; sed -e "s/=.*//" -- "$f";; '
    '*) echo "@@$m file $f"; head -c "$3" -- "$f";; '
    'esac; echo; done; true'
)
# args: lines. The kernel ring buffer's tail; dmesg's own exit status and message when it is refused.
DMESG_SCRIPT = ('out=$(dmesg 2>&1); rc=$?; if [ "$rc" -ne 0 ]; then printf "%s\\n" "$out" >&2; exit "$rc"; fi; '
                'printf "%s\\n" "$out" | tail -n "$1"')
MEMORY_SCRIPT = 'free -m 2>/dev/null || cat /proc/meminfo'


@dataclass(frozen=True)
class Item:
    """One thing to collect on a host."""

    name: str  # what the summary calls it
    path: str  # its file in the host's folder; for a framed item, the folder its files go to
    command: Command
    kind: str  # the signature source kind of its text (see signatures.json); "framed" items say per file
    tool: str  # the program that must exist on the host
    framed: str = ""  # containers | plog | state: the answer holds several files, each behind a marker line
    root: str = ""  # state: the remote directory its files' paths are kept relative to


def collection_plan(spec: Spec, host: str, *, lines: int, marker: str) -> tuple[Item, ...]:
    """Everything to collect on one host, in order (one batch: one round trip)."""
    items: list[Item] = []
    if spec.platform == "gpu":
        items.append(Item("nvidia-smi", "nvidia-smi.txt", Command(("nvidia-smi",)), "npu-smi", "nvidia-smi"))
    else:
        items.append(Item("npu-smi info", "npu-smi-info.txt", Command(("npu-smi", "info")), "npu-smi", "npu-smi"))
        for device in range(spec.requirements.cards):
            for flag, kind, suffix in (("-link", "hccn-link", "link"), ("-net_health", "hccn-health", "net-health"),
                                       ("-ip", "hccn-ip", "ip")):
                argv = ("hccn_tool", "-i", str(device), flag, "-g")
                items.append(Item(" ".join(argv), f"hccn/npu{device}-{suffix}.txt", Command(argv), kind, "hccn_tool"))
        items.append(Item("/etc/hccn.conf", "hccn.conf", Command(("cat", "/etc/hccn.conf")), "hccn-conf", "cat"))
    items += [
        Item("dmesg", "dmesg.txt", Command(("sh", "-c", DMESG_SCRIPT, "sh", str(lines))), "dmesg", "dmesg"),
        Item("df -h", "df.txt", Command(("df", "-h")), "system", "df"),
        Item("free -m", "memory.txt", Command(("sh", "-c", MEMORY_SCRIPT)), "system", "free"),
        Item("docker info", "docker-info.txt", Command(("docker", "info")), "system", "docker"),
        Item("containers", "containers", Command(("sh", "-c", CONTAINERS_SCRIPT, "sh",
                                                  f"{LABEL_DEPLOYMENT}={spec.name}", str(lines), marker)),
             "log", "docker", framed="containers"),
    ]
    if spec.platform != "gpu":
        items.append(Item("plog", "plog", Command(("sh", "-c", PLOG_SCRIPT, "sh", str(PLOG_FILES), str(lines), marker,
                                                   *PLOG_DIRS)), "plog", "find", framed="plog"))
    items.append(Item("state", "state", Command(("sh", "-c", STATE_SCRIPT, "sh", spec.remote_state_dir, marker,
                                                 str(STATE_FILE_BYTES))), "state", "find", framed="state",
                      root=spec.remote_state_dir))
    return tuple(items)
