"""The in-container contract (issue 22): once the workers run, each new container is asked, from inside
(`docker exec`, argv as data), whether it got what the plan gave it — exactly its NPUs, the files it reads,
the environment it was started with. A server can start healthy without hccn.conf and then answer wrong
tokens (vllm-ascend #7711); this stage fails the deploy first, naming the container, the item, expected and
found, and `up` rolls back as for any failure. Pure."""

from __future__ import annotations

import hashlib
from typing import Optional

from deployctl.core import Command
from deployctl.plan.containers import Container, RanktableFiles
from deployctl.plan.model import Step
from deployctl.servers.vllm_ascend.dp_launch import SOCKET_IFNAME_VARS

# args: the /dev directory, the expected NPU ids (comma list, "" for none), then items: f:PATH (a readable file:
# `docker run -v` turns a missing host file into an empty directory, and the server starts anyway), d:PATH (a
# directory),
# e:NAME=VALUE (the environment; NAME is always one of the constants below, so `eval` reads a fixed variable),
# n:IFNAME (a network interface), s:PATH=SHA256 (a file with exactly the content the plan rendered: a ranktable);
# prints one line per broken item, exit 1
CONTRACT_SCRIPT = (
    'dev=$1; want=$2; shift 2; bad=0; '
    'have=$(ls "$dev" | sed -n "s/^davinci\\([0-9][0-9]*\\)$/\\1/p" | sort -n | tr "\\n" ,); have=${have%,}; '
    '[ "$have" = "$want" ] || { echo "devices: expected ${want:-none}, found ${have:-none}"; bad=1; }; '
    'for item in "$@"; do v=${item#??}; case $item in '
    'f:*) if [ -d "$v" ]; then echo "file $v: expected a readable file, found a directory"; bad=1; '
    'elif [ ! -r "$v" ]; then echo "file $v: expected a readable file, found missing"; bad=1; fi;; '
    'd:*) [ -d "$v" ] || { echo "directory $v: expected present, found missing"; bad=1; };; '
    'e:*) n=${v%%=*}; x=${v#*=}; eval "g=\\${$n-}"; '
    '[ "$g" = "$x" ] || { echo "env $n: expected $x, found ${g:-unset}"; bad=1; };; '
    'n:*) [ -e "/sys/class/net/$v" ] || { echo "interface $v: expected present, found missing"; bad=1; };; '
    's:*) p=${v%=*}; x=${v##*=}; g=$(sha256sum "$p" 2>/dev/null | cut -d" " -f1); '
    '[ "$g" = "$x" ] || { echo "file $p: expected sha256 $x (as planned), found ${g:-unreadable}"; bad=1; };; '
    'esac; done; exit $bad'
)
# Not ASCEND_RT_VISIBLE_DEVICES: which NPUs the process sees is what the container mounts (the device check above:
# the runtime numbers those /dev/davinciN from 0), never the variable, which deployctl leaves unset (contract:
# "Settled on 2026-11-25" and "2026-11-28": CANN's numbering, reports such as vllm-ascend #2238; PR #12959 was closed
# unmerged and concerned A5 only); a value the user writes is linted by validate.
CHECKED_ENV = ("HCCL_IF_IP", "GLOBAL_RANK_TABLE_FILE_PATH", "RANK_TABLE_FILE_PATH", "NODE_PORTS")
# mount targets that are files on a host (the rest are directories: the driver, the weights, cgroups, logs)
FILE_TARGETS = frozenset({"/etc/hccn.conf", "/etc/ascend_install.info", "/etc/localtime", "/usr/local/bin/npu-smi",
                          "/usr/local/sbin/npu-smi", "/usr/local/bin/hccn_tool"})


def contract_items(container: Container, ranktables: Optional[RanktableFiles] = None) -> tuple[str, ...]:
    """What the container must see: its mounted files, its NPU env, its ranktables (with the content planned),
    its NICs."""
    items = [f"{'f' if m.target in FILE_TARGETS else 'd'}:{m.target}" for m in container.mounts]
    env = {e.name: e.value for e in container.env if not e.is_secret}
    for name in CHECKED_ENV:
        if name in env:
            items.append(f"e:{name}={env[name]}")
    for name in ("GLOBAL_RANK_TABLE_FILE_PATH", "RANK_TABLE_FILE_PATH"):
        if name in env:
            content = ranktables.contents.get(env[name].rsplit("/", 1)[-1]) if ranktables else None
            items.append(f"f:{env[name]}" if content is None
                         else f"s:{env[name]}={hashlib.sha256(content).hexdigest()}")
    for name in SOCKET_IFNAME_VARS:
        if name in env:
            items += [f"e:{name}={env[name]}", f"n:{env[name]}"]
    return tuple(dict.fromkeys(items))


def contract_step(container: Container, ranktables: Optional[RanktableFiles] = None) -> Optional[Step]:
    """The check of one Ascend worker container (none for the scheduler, the proxy or GPU containers)."""
    instance = container.instance
    if not instance.devices or container.gpus is not None:
        return None
    argv = ("docker", "exec", container.name, "sh", "-c", CONTRACT_SCRIPT, "sh", "/dev",
            ",".join(map(str, sorted(instance.devices))), *contract_items(container, ranktables))
    return Step(instance.host, "contract", "run", f"what {container.name} sees is what it was given",
                container=container.name, commands=(Command(argv, failure=f"{container.name} does not see what it "
                                                                           f"was given (the in-container contract)"),))
