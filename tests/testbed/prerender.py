"""Every output the fake tools can print for a profile, rendered ahead, and the tiny sh tools that print them.

Starting a Python interpreter per fake call costs ~18 ms CPU; real npu-smi/hccn_tool are native binaries. So
when a profile is written, each answer deployctl asks for is rendered into a file named after its argv, and the
installed tools are POSIX sh scripts that `cat` that file (~2 ms). Any other argv (a ping, a typo, an argument
with a space) and any host without the files (a container that mounts only hccn_tool) runs the Python renderer,
which the script carries in a here-document, so the fallback needs nothing but the script itself.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.testbed import fake_nvidia_smi, fakes

FAKE_DIR = "/etc/deployctl-fake"  # the profile's directory; the sh tools take $DEPLOYCTL_FAKE_DIR instead (tests)
OUT_LINK = "out"  # FAKE_DIR/out -> out-<generation>: swapped atomically when the profile changes
CALLS_LOG_FILE = "calls_log"  # inside the out dir: the path the sh tools append each call to
# Only argv words of these characters have files: never a separator, a quote (the JSON log line is written
# without escaping) or a slash, so "argv joined by spaces" names one argv exactly.
SAFE_WORD = re.compile(r"[A-Za-z0-9._=,-]+")
PY_END = "DEPLOYCTL_FAKE_PYTHON"

# nvidia-smi forms deployctl runs (facts.probes) plus the other --format variants of the same queries.
GPU_QUERY = "index,name,uuid,memory.total,memory.used,driver_version"
APP_QUERY = "gpu_uuid,pid,process_name,used_memory"
GPU_FORMATS = ("csv", "csv,noheader", "csv,noheader,nounits")


def file_name(argv) -> str | None:
    """The file stem of one argv (words joined by spaces), None when it has no pre-rendered file."""
    if not argv or not all(SAFE_WORD.fullmatch(word) for word in argv):
        return None
    return " ".join(argv)


def npu_smi_forms(profile: dict) -> list:
    cards = range(int(profile["cards"]))
    forms = [["info"], ["info", "-l"], ["info", "-m"]]
    forms += [["info", "-t", "board", "-i", str(n)] for n in cards]
    forms += [["info", "-t", kind, "-i", str(n), "-c", "0"] for kind in ("health", "memory") for n in cards]
    return forms


def hccn_tool_forms(profile: dict) -> list:
    what = ("-ip", "-link", "-net_health", "-netdetect", "-tls")
    return [["-i", str(n), w, "-g"] for n in range(int(profile["cards"])) for w in what]


def nvidia_smi_forms(profile: dict) -> list:
    forms = [["-L"]]
    for fmt in GPU_FORMATS:
        forms += [[f"--query-gpu={GPU_QUERY}", f"--format={fmt}"], [f"--query-compute-apps={APP_QUERY}", f"--format={fmt}"]]
    return forms


def outputs(profile: dict) -> dict:
    """{tool: {file stem: (stdout, stderr, exit code)}} for everything the profile's sh tools answer directly."""
    full = fakes.with_defaults(profile)
    rendered = {
        "npu-smi": {file_name(f): fakes.render_npu_smi(f, full) for f in npu_smi_forms(full)},
        "hccn_tool": {file_name(f): fakes.render_hccn_tool(f, full) for f in hccn_tool_forms(full)},
    }
    if full.get("kind") == "gpu":
        rendered["nvidia-smi"] = {file_name(f): _gpu(f, full) for f in nvidia_smi_forms(full)}
    return rendered


def _gpu(argv, profile):
    stdout, code = fake_nvidia_smi.render(argv, profile)
    return stdout, "", code


def files(profile: dict) -> dict:
    """{relative path inside the out dir: text}: `<tool>/<argv>.out` always, `.err`/`.rc` only when not empty/0."""
    written = {}
    for tool, answers in outputs(profile).items():
        for stem, (stdout, stderr, code) in answers.items():
            written[f"{tool}/{stem}.out"] = stdout
            if stderr:
                written[f"{tool}/{stem}.err"] = stderr
            if code:
                written[f"{tool}/{stem}.rc"] = f"{code}\n"
    if profile.get("calls_log"):
        written[CALLS_LOG_FILE] = profile["calls_log"] + "\n"
    return written


SH_TOOL = r"""#!/bin/sh
# Fake {tool} of the deployctl test bed (tests/testbed/prerender.py). Fast path: the answer pre-rendered from
# the host's profile for exactly this argv; otherwise the Python renderer at the end of this file.
o=${{DEPLOYCTL_FAKE_DIR:-{fake_dir}}}/{out_link}
k=
j=
for a do
  case $a in ''|*[!A-Za-z0-9._=,-]*) k=; break ;; esac
  k="$k${{k:+ }}$a"
  j="$j${{j:+, }}\"$a\""
done
if [ -n "$k" ] && [ -f "$o/{tool}/$k.out" ]; then
  if [ -f "$o/{calls_log}" ]; then
    read -r log < "$o/{calls_log}"
    printf '{{"time": %s, "tool": "{tool}", "argv": [%s], "pid": %s}}\n' "$(date +%s.%N)" "$j" "$$" >> "$log" 2>/dev/null
  fi
  [ -s "$o/{tool}/$k.out" ] && cat "$o/{tool}/$k.out"
  [ -f "$o/{tool}/$k.err" ] && cat "$o/{tool}/$k.err" >&2
  rc=0
  [ -f "$o/{tool}/$k.rc" ] && read -r rc < "$o/{tool}/$k.rc"
  exit "$rc"
fi
exec /usr/bin/python3 - "$@" <<'{py_end}'
{python}
{py_end}
"""


def sh_tool(tool: str, python_source: str, entry: str) -> str:
    """The installed tool: the sh fast path, then `python_source` + `entry` as the fallback's program."""
    python = python_source.rstrip("\n") + "\n\n" + entry
    if any(line == PY_END for line in python.splitlines()):
        raise ValueError(f"the fake's source contains the here-document end marker {PY_END}")
    return SH_TOOL.format(tool=tool, fake_dir=FAKE_DIR, out_link=OUT_LINK, calls_log=CALLS_LOG_FILE,
                          py_end=PY_END, python=python.rstrip("\n"))


def fakes_tool(tool: str) -> str:
    """npu-smi or hccn_tool."""
    entry = f"if __name__ == '__main__':\n    sys.exit(main({tool!r}, sys.argv[1:]))"
    return sh_tool(tool, Path(fakes.__file__).read_text(), entry)


def nvidia_smi_tool() -> str:
    entry = "if __name__ == '__main__':\n    sys.exit(main(sys.argv[1:]))"
    return sh_tool("nvidia-smi", Path(fake_nvidia_smi.__file__).read_text(), entry)
