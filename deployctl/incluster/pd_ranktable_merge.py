#!/usr/bin/env python3
"""deployctl's in-pod ranktable merge for the AscendCloud P/D flow on MindCluster: stdlib only, Python >= 3.7.

MindCluster's ascend-operator writes each P/D instance's ranktable (the NPUs the device plugin gave its one pod)
into the ConfigMap rings-config-<Deployment> under hccl.json, `status` "initializing" until the pod is placed
(mind-cluster component/ascend-operator/pkg/controllers/v1/pod.go writeRanktableToCm, consts.go; the format:
docs/en/scheduling/api/hccl.json_file_description.md). This program waits until every instance's says
"completed", turns each into that instance's entry of the vendor's P/D global ranktable with the pod's IP as
server_id and server_ip (what `pd_ranktable_tools.py --mode gen` writes when run in the pod), adds the scheduler
(group "0") and merges them as `deployctl ranktable merge` does (groups 0, 1, 2, each in the order given; an NPU
or a device IP twice, or two tensor-parallel sizes, refused). It writes the global file and this pod's local file
in the vendor's form (`json.dump(obj, f, indent=4)`), then, for the scheduler, waits until every instance serves
(the runbook starts the scheduler last). Every wait is bounded and ends in an error naming what it waited for.
"""

import argparse
import json
import os
import socket
import sys
import time
import urllib.request

GLOBAL_NAME = "global_ranktable_merge.json"
LOCAL_NAME = "local_ranktable.json"
HCCL_JSON = "hccl.json"
SCHEDULER, PREFILL, DECODE = "0", "1", "2"
GROUP_OF_ROLE = {"prefill": PREFILL, "decode": DECODE}


class Refused(Exception):
    """What makes the inputs unusable, said once on stderr."""


def parse(argv):
    p = argparse.ArgumentParser(prog="pd_ranktable_merge.py")
    p.add_argument("--instance", nargs=3, action="append", default=[], metavar=("ROLE", "NAME", "DIR"),
                   help="a P/D instance in the global order (prefill first): its role, name and the directory "
                        "holding its ConfigMap's hccl.json")
    p.add_argument("--scheduler", required=True, metavar="NAME", help="the scheduler instance's name")
    p.add_argument("--scheduler-address", metavar="HOST", help="where the scheduler pod resolves (P/D pods)")
    p.add_argument("--own", required=True, metavar="NAME", help="the instance this pod runs")
    p.add_argument("--pod-ip", required=True, metavar="IP", help="this pod's IP (status.podIP)")
    p.add_argument("--out", required=True, metavar="DIR", help="where the servers read their ranktables")
    p.add_argument("--wait-s", type=float, default=1200.0, help="how long to wait for the ranktables")
    p.add_argument("--retry-s", type=float, default=2.0, help="seconds between looks")
    p.add_argument("--health", metavar="PATH", help="the scheduler only: wait until each instance answers PATH")
    p.add_argument("--health-wait-s", type=float, default=1200.0)
    p.add_argument("--node-ports", metavar="PORTS", help="NODE_PORTS: each instance's port, in the global order")
    return p.parse_args(argv)


def read_instance(role, name, directory):
    """(entry, None) once the instance's ranktable is complete, else (None, why not yet)."""
    path = os.path.join(directory, HCCL_JSON)
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except (OSError, ValueError) as exc:
        return None, "%s (%s): %s unreadable: %s" % (name, role, path, exc)
    if not isinstance(document, dict) or document.get("status") != "completed":
        status = document.get("status") if isinstance(document, dict) else None
        return None, "%s (%s): %s says status %r, not 'completed'" % (name, role, path, status)
    servers = document.get("server_list")
    if not isinstance(servers, list) or len(servers) != 1:
        raise Refused("%s (%s): %s lists %s servers; one pod per instance gives one" % (
            name, role, path, len(servers) if isinstance(servers, list) else "no"))
    return server_entry(name, servers[0]), None


def server_entry(name, server):
    """The operator's server (device list, container_ip) as the vendor's P/D entry of one instance: its pod IP as
    server_id and server_ip, rank_id logical from 0 in the operator's rank order."""
    ip = server.get("container_ip") if isinstance(server, dict) else None
    devices = server.get("device") if isinstance(server, dict) else None
    if not isinstance(ip, str) or not ip:
        raise Refused("%s: its ranktable has no container_ip (the pod's IP)" % name)
    if not isinstance(devices, list) or not devices:
        raise Refused("%s: its ranktable lists no NPU" % name)
    ordered = sorted(devices, key=lambda d: int(str(d.get("rank_id", "0"))))
    out = []
    for rank, device in enumerate(ordered):
        if not device.get("device_id") or not device.get("device_ip"):
            raise Refused("%s: an NPU without device_id or device_ip: %r" % (name, device))
        out.append({"device_id": str(device["device_id"]), "device_ip": str(device["device_ip"]),
                    "rank_id": str(rank)})
    return {"server_id": ip, "server_ip": ip, "device": out}


def merge(scheduler_ip, entries):
    """The complete global document: the scheduler, then prefill and decode entries in the order given."""
    refuse_duplicates(entries)
    sizes = sorted({len(e["device"]) for _, e in entries})
    if len(sizes) > 1:
        raise Refused("prefill and decode instances must share one tensor-parallel size, got %s" % sizes)
    groups = [(SCHEDULER, [{"server_id": scheduler_ip, "server_ip": scheduler_ip}])]
    for group_id in (PREFILL, DECODE):
        servers = [e for g, e in entries if g == group_id]
        if not servers:
            raise Refused("no %s instance: group \"%s\" would be empty" % (
                "prefill" if group_id == PREFILL else "decode", group_id))
        groups.append((group_id, servers))
    return {"version": "1.0", "status": "completed", "server_group_list": [
        {"group_id": g, "server_count": str(len(servers)), "server_list": servers} for g, servers in groups]}


def refuse_duplicates(entries):
    npu_at, ip_at, found = {}, {}, []
    for _, entry in entries:
        for device in entry["device"]:
            npu = (entry["server_ip"], device["device_id"])
            if npu in npu_at:
                found.append("NPU %s of %s twice" % (device["device_id"], entry["server_ip"]))
            npu_at[npu] = True
            if device["device_ip"] in ip_at:
                found.append("device IP %s twice" % device["device_ip"])
            ip_at[device["device_ip"]] = True
    if found:
        raise Refused("refused: %s" % "; ".join(found))


def local(entry):
    return {"version": "1.0", "status": "completed", "group_id": "0", "server_count": "1", "server_list": [entry]}


def write(directory, name, document):
    """Atomically (a server never reads half a file), in the vendor's form: indent 4, no trailing newline."""
    path = os.path.join(directory, name)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(json.dumps(document, indent=4))
    os.replace(path + ".tmp", path)


def resolve(host, deadline, retry_s):
    """The scheduler pod's IP: its headless Service publishes it once the pod has one."""
    while True:
        try:
            return socket.gethostbyname(host)
        except OSError as exc:
            why = str(exc)
        if time.monotonic() >= deadline:
            raise Refused("gave up waiting for the scheduler's address %s to resolve (%s); is the scheduler pod "
                          "running and its headless Service published?" % (host, why))
        log("waiting for the scheduler's address %s to resolve" % host)
        time.sleep(retry_s)


def gather(args, deadline):
    """Every instance's entry once all are complete (this pod's with its own IP: a ConfigMap left by the pod this
    one replaced still says completed, with the old pod's IP)."""
    while True:
        entries, waiting = [], []
        for role, name, directory in args.instance:
            if role not in GROUP_OF_ROLE:
                raise Refused("%s: role %r, expected prefill or decode" % (name, role))
            entry, why = read_instance(role, name, directory)
            if entry is not None and name == args.own and entry["server_ip"] != args.pod_ip:
                entry, why = None, "%s (%s): its ranktable names the pod %s, not this pod (%s)" % (
                    name, role, entry["server_ip"], args.pod_ip)
            if entry is None:
                waiting.append(why)
            else:
                entries.append((GROUP_OF_ROLE[role], entry))
        if not waiting:
            return entries
        if time.monotonic() >= deadline:
            raise Refused("gave up after %g s waiting for ascend-operator's ranktables: %s; is ascend-operator "
                          "running, and was each rings-config ConfigMap created with the Deployment?" % (
                              args.wait_s, "; ".join(waiting)))
        log("waiting for %d ranktable(s): %s" % (len(waiting), "; ".join(waiting)))
        time.sleep(args.retry_s)


def wait_health(args, document):
    """The scheduler starts after its instances serve (runbook: prefill and decode first)."""
    ports = [p for p in (args.node_ports or "").split(",") if p]
    backends = [s for g in document["server_group_list"][1:] for s in g["server_list"]]
    if len(ports) != len(backends):
        raise Refused("NODE_PORTS %r names %d ports for %d instances" % (args.node_ports, len(ports), len(backends)))
    deadline = time.monotonic() + args.health_wait_s
    for server, port in zip(backends, ports):
        url = "http://%s:%s%s" % (server["server_ip"], port, args.health)
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as answer:
                    if answer.status == 200:
                        break
                    why = "HTTP %d" % answer.status
            except Exception as exc:  # not up yet: refused, reset, 503
                why = str(exc)
            if time.monotonic() >= deadline:
                raise Refused("gave up after %g s waiting for %s to answer 200 (%s)" % (args.health_wait_s, url, why))
            log("waiting for %s" % url)
            time.sleep(args.retry_s)


def log(message):
    print("pd_ranktable_merge: %s" % message, file=sys.stderr, flush=True)


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    deadline = time.monotonic() + args.wait_s
    try:
        entries = gather(args, deadline)
        if args.own == args.scheduler:
            scheduler_ip = args.pod_ip
        elif args.scheduler_address:
            scheduler_ip = resolve(args.scheduler_address, deadline, args.retry_s)
        else:
            raise Refused("--scheduler-address is needed in a prefill or decode pod")
        document = merge(scheduler_ip, entries)
        own = next((e for (_, name, _), (_, e) in zip(args.instance, entries) if name == args.own), None)
        if own is None and args.own != args.scheduler:
            raise Refused("%s is neither an instance given nor the scheduler" % args.own)
        os.makedirs(args.out, exist_ok=True)
        write(args.out, GLOBAL_NAME, document)
        write(args.out, LOCAL_NAME, local(own or document["server_group_list"][0]["server_list"][0]))
        log("wrote %s and %s in %s" % (GLOBAL_NAME, LOCAL_NAME, args.out))
        if args.health and args.own == args.scheduler:
            wait_health(args, document)
    except Refused as exc:
        log(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
