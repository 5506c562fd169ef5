"""Fake `npu-smi` and `hccn_tool`: render the real vendor formats from a host profile.

This file is embedded verbatim (with an entry point) as the fallback of the sh tools installed at each test
host's /usr/local/sbin/npu-smi and /usr/local/Ascend/driver/tools/hccn_tool (prerender.py), so it must stay
standalone: stdlib only, Python >= 3.7 (containers and hosts run whatever python3 they have).
The renderers are pure (profile dict in, (stdout, stderr, exit code) out); only `main` does I/O.
"""

from __future__ import annotations

import json
import os
import sys
import time

FAKE_DIR = "/etc/deployctl-fake"
PROFILE_PATH = FAKE_DIR + "/profile.json"
HCCN_CONF_PATH = "/etc/hccn.conf"

# Per-card readings of an idle Atlas 800T A2 (the values of the formats' 910B3 sample), so a
# default profile renders that sample byte for byte; cards 8-15 (A3-like) continue the pattern.
IDLE_POWER = (98.4, 95.1, 101.7, 96.2, 99.8, 94.6, 97.0, 100.3)
IDLE_TEMP = (44, 46, 43, 47, 45, 44, 42, 46)
IDLE_HBM_USED = (3391, 3388, 3390, 3389, 3392, 3387, 3390, 3386)
BUS_IDS = ("C1", "01", "C2", "02", "81", "41", "82", "42")

DEFAULT_PROFILE = {
    "host": "tb",
    "cards": 8,
    "chip": "910B3",
    "hbm_mb": 65536,
    "driver": "23.0.6",
    "firmware": "7.1.0.9.220",
    "product_name": "IT21HMDB07",
    "subsystem_device_id": "0x3002",
    "serial_prefix": "102491F3A0",
    "npu_smi_fails": False,  # True: `npu-smi info` prints the dcmi -8005 failure
    "trailing_warning": False,  # True: the "[WARNING]The driver package ..." last line
    "health": {},  # card -> OK | Warning | Alarm | Critical | UNKNOWN (default OK)
    "error_codes": {},  # card -> "80E18005 80E18006" (shown by -t health; default NA)
    "processes": {},  # card -> [{"pid": 1, "name": "python3.9", "memory_mb": 52876}]
    # card -> any of {"power": W, "temp": C, "aicore": AI core utilisation %, "hbm_used": MB}, shown by `npu-smi info`
    # (default: idle, 0 %, the idle HBM + the card's processes' memory); whole numbers but power
    "stats": {},
    "device_ips": [],  # per card; null = no RoCE IP configured
    "hccn_conf_ips": {},  # card -> the address /etc/hccn.conf says instead of the live one (a stale entry)
    "netmask": "255.255.255.0",
    "netdetect": None,  # default: the .1 of the card's /24
    "link": {},  # card -> UP | DOWN (default UP)
    "net_health": {},  # card -> Success | Init | Fault | ... (default Success)
    "tls": {},  # card -> 0 | 1 (default 0)
    "calls_log": None,  # file each call is appended to (skipped when not writable)
    # Device IPs a `-ping` reaches; None: those of every bed host (their profiles, read through the anchors under
    # `bed_hosts`) whose link is UP. Nothing else answers, so a wrong peer address fails as on real hardware.
    "reachable": None,
    "bed_hosts": None,
}

RULE = "+" + "-" * 96 + "+"
SPLIT_RULE = "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+"
DOUBLE_RULE = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+"
INFO_HEADER = (
    "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
    "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
)
PROCESS_HEADER = "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |"
DCMI_FAILURE = "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\ndcmi module initialize failed. ret is -8005\n"
DRIVER_WARNING = (
    "[WARNING]The driver package may not be completely installed, please check the "
    "Driver_Install_Status in /etc/ascend_install.info.\n"
)
INFO_USAGE = """Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]

Commands:
       watch          Show all device's status in scrolling format
       proc           Show device's matrix process status in scrolling format
       -h, --help     Show this help text and exit
       -m             Show all device's mapping information
       -l             Show all device's topology information
       -t type        Show information for type
                      type: board, flash, memory, usages, sensors, temp, power, volt, mac-addr,
                            common, health, product, ecc, ip, sys-time, i2c_check, work-mode,
                            ecc-enable, p2p-enable, ssh-enable, license, customized-info,
                            device-share, nve-level, aicpu-config, pcie-err, mcu-monitor,
                            err-count, boot-area, vnpu-mode, info-vnpu, vnpu-svm, cpu-num-cfg,
                            first-power-on-date, proc-mem, phyid-remap, vnpu-cfg-recover, key-manage,
                            template-info, pkcs-enable, p2p-mem-cfg, pwm-mode, pwm-duty-ratio,
                            boot-select, topo.

Options:
       -i %d          Card ID
       -c %d          Chip ID
       -p %d          Chip Physical ID
"""


def with_defaults(profile):
    """The profile with every missing key filled from DEFAULT_PROFILE."""
    merged = dict(DEFAULT_PROFILE)
    merged.update(profile or {})
    return merged


def _per_card(profile, key, card, default):
    # JSON object keys are strings; accept ints too for profiles built in Python.
    table = profile.get(key) or {}
    return table.get(str(card), table.get(card, default))


def card_ids(profile):
    return list(range(int(profile["cards"])))


def bus_id(card):
    base = BUS_IDS[card % 8]
    if card >= 8:  # second board of an A3-like node: next PCIe domain
        return "0000:%02X:00.0" % (int(base, 16) + 0x10)
    return "0000:%s:00.0" % base


def card_stats(profile, card):
    """Power, temperature, AI core %, HBM used of one card (profile overrides win)."""
    processes = _per_card(profile, "processes", card, [])
    base = {
        "power": IDLE_POWER[card % 8],
        "temp": IDLE_TEMP[card % 8],
        "aicore": 0,
        "hbm_used": IDLE_HBM_USED[card % 8] + sum(int(p["memory_mb"]) for p in processes),
    }
    base.update(_per_card(profile, "stats", card, {}))
    for key in ("temp", "aicore", "hbm_used"):  # npu-smi prints whole numbers there (and deployctl parses them so)
        base[key] = int(round(float(base[key])))
    return base


def render_npu_smi_info(profile):
    """`npu-smi info`: the 98-column table (HDK 23.0.x-25.x, 910B single die)."""
    if profile["npu_smi_fails"]:
        return DCMI_FAILURE, "", 187
    lines = [RULE, "| npu-smi %-24s Version: %-53s|" % (profile["driver"], profile["driver"]), SPLIT_RULE]
    lines += [*INFO_HEADER, DOUBLE_RULE]
    for card in card_ids(profile):
        stats = card_stats(profile, card)
        health = _per_card(profile, "health", card, "OK")
        lines.append(
            "| %-5s %-20s| %-13s | %-11s %-17s %-5s/ %-13s |"
            % (card, profile["chip"], health, "%.1f" % stats["power"], stats["temp"], 0, 0)
        )
        lines.append(
            "| %-26s| %-13s | %-11s %-5s/ %-10s %-5s/ %-13s |"
            % (0, bus_id(card), stats["aicore"], 0, 0, stats["hbm_used"], profile["hbm_mb"])
        )
        lines.append(DOUBLE_RULE)
    lines += [SPLIT_RULE, PROCESS_HEADER, DOUBLE_RULE]
    for card in card_ids(profile):
        processes = _per_card(profile, "processes", card, [])
        if not processes:
            lines.append("| %-95s|" % ("No running processes found in NPU %d" % card))
        for proc in processes:
            lines.append(
                "| %-7s %-18s| %-13s | %-24s | %-24s|" % (card, 0, proc["pid"], proc["name"], proc["memory_mb"])
            )
        lines.append(DOUBLE_RULE)
    text = "\n".join(lines) + "\n"
    if profile["trailing_warning"]:
        text += DRIVER_WARNING
    return text, "", 0


def _kv(key, value):
    return "\t%-30s : %s\n" % (key, value)


def render_npu_smi_list(profile):
    """`npu-smi info -l`."""
    text = _kv("Total Count", profile["cards"]) + "\n"
    for card in card_ids(profile):
        text += _kv("NPU ID", card) + _kv("Chip Count", 1) + "\n"
    return text, "", 0


def render_npu_smi_mapping(profile):
    """`npu-smi info -m`: the chip row's name is not padded, the Mcu row's is (as real output)."""
    text = "\t%-30s %-30s %-30s %-30s\n" % ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Name")
    for card in card_ids(profile):
        text += "\t%-30s %-30s %-30s %s\n" % (card, 0, card, "Ascend " + profile["chip"])
        text += "\t%-30s %-30s %-30s %-30s\n" % (card, 1, "-", "Mcu")
    return text, "", 0


def render_invalid_card():
    return "Invalid card id.\nError parameter of -i\n" + INFO_USAGE, "", 215


def render_npu_smi_board(profile, card):
    """`npu-smi info -t board -i N`."""
    fields = (
        ("NPU ID", card),
        ("Product Name", profile["product_name"]),
        ("Model", "NA"),
        ("Manufacturer", "Huawei"),
        ("Serial Number", "%s%02X" % (profile["serial_prefix"], 0xC0 + card)),
        ("Software Version", profile["driver"]),
        ("Firmware Version", profile["firmware"]),
        ("Compatibility", "OK"),
        ("Board ID", "0x65"),
        ("PCB ID", "A"),
        ("BOM ID", 1),
        ("PCIe Bus Info", bus_id(card)),
        ("Slot ID", card),
        ("Class ID", "NA"),
        ("PCI Vendor ID", "0x19E5"),
        ("PCI Device ID", "0xD802"),
        ("Subsystem Vendor ID", "0x19E5"),
        ("Subsystem Device ID", profile["subsystem_device_id"]),
        ("Chip Count", 1),
    )
    return "".join(_kv(k, v) for k, v in fields), "", 0


def render_npu_smi_health(profile, card):
    """`npu-smi info -t health -i N -c C`."""
    health = _per_card(profile, "health", card, "OK")
    default_code = "NA" if health == "OK" else "80E18005"
    codes = _per_card(profile, "error_codes", card, default_code)
    info = "NA" if codes == "NA" else "node type=HBM, sensor type=Memory, event state=multi-bit ECC"
    text = _kv("Health Status", health) + _kv("Error Code", codes) + _kv("Error Information", info)
    return text, "", 0


def render_npu_smi_memory(profile, card):
    """`npu-smi info -t memory -i N -c C`."""
    fields = (
        ("DDR Capacity(MB)", 0),
        ("DDR Clock Speed(MHz)", 0),
        ("HBM Capacity(MB)", profile["hbm_mb"]),
        ("HBM Clock Speed(MHz)", 1600),
        ("HBM Temperature(C)", card_stats(profile, card)["temp"] - 3),
        ("HBM Manufacturer ID", "0x56"),
    )
    return "".join(_kv(k, v) for k, v in fields), "", 0


def _option(argv, flag):
    if flag in argv and argv.index(flag) + 1 < len(argv):
        return argv[argv.index(flag) + 1]
    return None


def _card_arg(profile, argv):
    value = _option(argv, "-i")
    if value is None or not value.isdigit() or int(value) >= int(profile["cards"]):
        return None
    return int(value)


def render_npu_smi(argv, profile):
    """Dispatch `npu-smi ARGV` (argv without the program name) to its renderer."""
    profile = with_defaults(profile)
    if argv[:1] != ["info"]:
        return "", "Unknown command: %s\n" % " ".join(argv), 1
    rest = argv[1:]
    if not rest:
        return render_npu_smi_info(profile)
    if profile["npu_smi_fails"]:
        return DCMI_FAILURE, "", 187
    if rest == ["-l"]:
        return render_npu_smi_list(profile)
    if rest == ["-m"]:
        return render_npu_smi_mapping(profile)
    kind = _option(rest, "-t")
    renderers = {"board": render_npu_smi_board, "health": render_npu_smi_health, "memory": render_npu_smi_memory}
    if kind in renderers:
        card = _card_arg(profile, rest)
        if card is None:
            return render_invalid_card()
        return renderers[kind](profile, card)
    return INFO_USAGE, "", 1


def device_ip(profile, card):
    ips = profile.get("device_ips") or []
    return ips[card] if card < len(ips) else None


def _netdetect(profile, ip):
    if profile.get("netdetect"):
        return profile["netdetect"]
    return ip.rsplit(".", 1)[0] + ".1"


def render_hccn_conf(profile):
    """/etc/hccn.conf as the driver's tooling writes it (cards without an IP are left out)."""
    profile = with_defaults(profile)
    text = ""
    for card in card_ids(profile):
        ip = profile["hccn_conf_ips"].get(str(card)) or device_ip(profile, card)
        if ip is None:
            continue
        gateway = _netdetect(profile, ip)
        text += "address_%d=%s\nnetmask_%d=%s\n" % (card, ip, card, profile["netmask"])
        text += "netdetect_%d=%s\ngateway_%d=%s\n" % (card, gateway, card, gateway)
        text += "send_arp_status_%d=1\ntls_enable_%d=%s\n" % (card, card, _per_card(profile, "tls", card, 0))
    return text


def render_hccn_tool(argv, profile):
    """Dispatch `hccn_tool ARGV` (argv without the program name)."""
    profile = with_defaults(profile)
    value = _option(argv, "-i")
    if value is None or not value.isdigit() or int(value) >= int(profile["cards"]):
        return "", "Get invalid device id.\n", 1
    card = int(value)
    ip = device_ip(profile, card)
    if "-ip" in argv and "-g" in argv:
        if ip is None:
            return "", "Get ipconf failed, because no ip was preset there!\n", 13
        return "ipaddr:%s\nnetmask:%s\n" % (ip, profile["netmask"]), "", 0
    if "-link" in argv:
        return "link status: %s\n" % _per_card(profile, "link", card, "UP"), "", 0
    if "-net_health" in argv:
        return "net health status: %s\n" % _per_card(profile, "net_health", card, "Success"), "", 0
    if "-netdetect" in argv:
        if ip is None:
            return "", "Get netdetect failed, because no ip was preset there!\n", 13
        return "netdetect addr: %s\n" % _netdetect(profile, ip), "", 0
    if "-tls" in argv:
        switch = _per_card(profile, "tls", card, 0)
        return (
            "dev_id:%d, tls switch[%s](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset), "
            "tls alarm time threshold[60]days\n" % (card, switch),
            "",
            0,
        )
    if "-ping" in argv:
        target = _option(argv, "address") or ""
        text = "device %d PING %s\n" % (card, target)
        if _per_card(profile, "link", card, "UP") != "UP" or ip is None:
            return text + "3 packets transmitted, 0 received, 100.00% packet loss\n", "", 1
        if target not in reachable_ips(profile):
            text += "".join("recv time out seq=%d\n" % seq for seq in range(3))
            return text + "3 packets transmitted, 0 received, 100.00% packet loss\n", "", 0
        for seq, ms in enumerate(("0.061000", "0.027000", "0.025000")):
            text += "recv seq=%d,time=%sms\n" % (seq, ms)
        return text + "3 packets transmitted, 3 received, 0.00% packet loss\n", "", 0
    return "", "Unknown parameter: %s\n" % " ".join(argv), 1


def reachable_ips(profile):
    """The device IPs a ping from this host reaches (see DEFAULT_PROFILE's `reachable`)."""
    if profile.get("reachable") is not None:
        return set(profile["reachable"])
    hosts_dir = profile.get("bed_hosts")
    found = set()
    for name in sorted(os.listdir(hosts_dir)) if hosts_dir and os.path.isdir(hosts_dir) else []:
        try:
            with open(os.path.join(hosts_dir, name, "anchor.pid")) as handle:
                pid = handle.read().strip()
            with open("/proc/%s/root%s" % (pid, PROFILE_PATH)) as handle:
                peer = with_defaults(json.load(handle))
        except (OSError, ValueError):
            continue  # a host being set up or torn down
        for card in range(int(peer["cards"])):
            address = device_ip(peer, card)
            if address and _per_card(peer, "link", card, "UP") == "UP":
                found.add(address)
    return found


def _profile_from_hccn_conf():
    # Inside a container only /etc/hccn.conf (and this tool) are mounted: rebuild the IPs from it.
    ips = {}
    try:
        with open(HCCN_CONF_PATH) as conf:
            for line in conf:
                key, _, value = line.strip().partition("=")
                if key.startswith("address_"):
                    ips[int(key[len("address_"):])] = value
    except OSError:
        return {}
    cards = max(ips) + 1 if ips else 0
    return {"cards": cards, "device_ips": [ips.get(n) for n in range(cards)]}


def load_profile(tool):
    # $DEPLOYCTL_FAKE_DIR: unit tests run the installed tools against a profile in a temporary directory.
    try:
        with open(os.environ.get("DEPLOYCTL_FAKE_DIR", FAKE_DIR) + "/profile.json") as handle:
            return json.load(handle)
    except OSError:
        return _profile_from_hccn_conf() if tool == "hccn_tool" else {}


def log_call(profile, tool, argv):
    path = profile.get("calls_log")
    if not path:
        return
    try:
        with open(path, "a") as log:
            log.write(json.dumps({"time": time.time(), "tool": tool, "argv": argv, "pid": os.getpid()}) + "\n")
    except OSError:
        pass  # e.g. inside a container, where the host's log is not mounted


def main(tool, argv):
    profile = load_profile(tool)
    log_call(profile, tool, argv)
    render = render_npu_smi if tool == "npu-smi" else render_hccn_tool
    stdout, stderr, code = render(argv, profile)
    sys.stdout.write(stdout)
    sys.stderr.write(stderr)
    return code
