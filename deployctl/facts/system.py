"""Parsers for plain system commands: sysctl, df, uname."""

from __future__ import annotations

from deployctl.errors import FactParseError
from deployctl.facts.model import DiskFree, OsRelease
from deployctl.facts.text import first_line, numbered_lines, to_int

IP_FORWARD = "net.ipv4.ip_forward"


def parse_sysctl_value(text: str) -> int:
    """`sysctl -n net.ipv4.ip_forward`: a bare integer (0 or 1)."""
    lines = numbered_lines(text)
    if len(lines) != 1:
        number, line = first_line(text)
        raise FactParseError("sysctl -n", number, line, "one integer value")
    number, line = lines[0]
    return to_int(line.strip(), "sysctl -n", number, line, "the value")


def parse_df(text: str) -> DiskFree:
    """`df -Pk PATH`: POSIX format, 1024-byte blocks; the last line is the filesystem holding PATH."""
    tool = "df -Pk"
    lines = numbered_lines(text)
    if len(lines) < 2 or not lines[0][1].startswith("Filesystem") or "1024-blocks" not in lines[0][1]:
        number, line = lines[0] if lines else (1, "")
        raise FactParseError(tool, number, line, "the header 'Filesystem 1024-blocks Used Available Capacity Mounted on'")
    number, line = lines[-1]
    # a filesystem name may contain spaces; the five columns on its right never do (except the mount point)
    words = line.split()
    numbers = [i for i, word in enumerate(words) if word.endswith("%")]
    if not numbers or numbers[0] < 4:
        raise FactParseError(tool, number, line, "'<fs> <blocks> <used> <available> <capacity%> <mount>'")
    pct = numbers[0]
    blocks, used, available = (to_int(w, tool, number, line, "a block count") for w in words[pct - 3:pct])
    return DiskFree(
        filesystem=" ".join(words[: pct - 3]),
        total_bytes=blocks * 1024,
        used_bytes=used * 1024,
        available_bytes=available * 1024,
        mounted_on=" ".join(words[pct + 1:]),
    )


def parse_uname_machine(text: str) -> str:
    """`uname -m`: the machine architecture (aarch64, x86_64)."""
    lines = numbered_lines(text)
    if len(lines) != 1 or len(lines[0][1].split()) != 1:
        number, line = first_line(text)
        raise FactParseError("uname -m", number, line, "one word such as 'aarch64' or 'x86_64'")
    return lines[0][1].strip()


def parse_os_release(text: str) -> OsRelease:
    """`cat /etc/os-release`: shell-style KEY=value lines (values optionally quoted); ID is required."""
    values = {}
    for number, line in numbered_lines(text):
        if line.lstrip().startswith("#"):
            continue
        key, found, value = line.partition("=")
        if not found or not key.strip().isidentifier():
            raise FactParseError("cat /etc/os-release", number, line, "KEY=value")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key.strip()] = value
    if not values.get("ID"):
        number, line = first_line(text)
        raise FactParseError("cat /etc/os-release", number, line, "an ID= line (e.g. ID=ubuntu)")
    return OsRelease(id=values["ID"], id_like=tuple(values.get("ID_LIKE", "").split()),
                     version_id=values.get("VERSION_ID"), pretty_name=values.get("PRETTY_NAME"))
