"""Host program (sent as data to `python3 -c`, stdlib only, python >= 3.7): make the settings of our sysctl file
(net.ipv4.ip_forward=1; vm.swappiness=0 and kernel.numa_balancing=0) the values both boot loaders end with, and
print what it changed as JSON. argv: our file, its content (the settings are read from it), earlier names of it."""

import json
import os
import shutil
import sys

KEY = "net.ipv4.ip_forward"  # the default key of final_value and set_to_one
SYSCTL_CONF = "/etc/sysctl.conf"
# systemd-sysctl's and procps 4's search path; for one file name the first directory that has it wins. /run is
# volatile, so a setting there is overridden from /etc, never edited.
DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")
BACKUP = ".deployctl.bak"
MARK = "# written by deployctl doctor --fix"


def assignment(line):
    """(key, value) of a sysctl.conf line, the key in dotted form; None for comments, blanks and junk."""
    line = line.strip()
    if not line or line[0] in "#;" or "=" not in line:
        return None
    key, _, value = line.lstrip("-").partition("=")
    key = key.strip()
    slash, dot = key.find("/"), key.find(".")
    if slash != -1 and (dot == -1 or slash < dot):  # both loaders accept net/ipv4/ip_forward
        key = key.replace("/", ".")
    return key, value.strip()


def final_value(text, key=KEY):
    """The value the file leaves `key` at (its last assignment), or None when it does not set it."""
    values = [a[1] for a in map(assignment, text.splitlines()) if a and a[0] == key]
    return values[-1] if values else None


def set_to_one(text, wanted=None):
    """The file with every other value of a wanted key (default: KEY = 1) replaced, each old line kept as a
    comment above."""
    wanted = wanted or {KEY: "1"}
    out = []
    for line in text.splitlines():
        a = assignment(line)
        if a and a[0] in wanted and a[1] != wanted[a[0]]:
            out += ["# deployctl doctor --fix (was: %s)" % line.strip(), "%s = %s" % (a[0], wanted[a[0]])]
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def overruled(text, wanted):
    """The wanted keys this file leaves at another value: (key, value it leaves)."""
    return [(k, final_value(text, k)) for k in wanted if final_value(text, k) not in (None, wanted[k])]


def effective_files():
    """File name -> the path both loaders read for it (names sort across directories; /etc shadows the rest)."""
    found = {}
    for folder in DIRS:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if name.endswith(".conf") and name not in found:
                found[name] = os.path.join(folder, name)
    return found


def read(path):
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return f.read()


def write(path, text, like=None):
    """Replace `path` atomically, keeping the mode and owner of `like` (0644 root for a new file)."""
    tmp = os.path.join(os.path.dirname(path), ".%s.deployctl-tmp" % os.path.basename(path))
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    st = os.stat(like) if like and os.path.exists(like) else None
    os.chmod(tmp, st.st_mode & 0o7777 if st else 0o644)
    if st:
        os.chown(tmp, st.st_uid, st.st_gid)
    os.replace(tmp, path)


def edit_in_place(path, text, wanted, actions, files):
    """Set the wanted keys in a file under /etc, after copying it to <path>.deployctl.bak."""
    was = overruled(text, wanted)
    shutil.copy2(path, path + BACKUP)
    write(path, set_to_one(text, wanted), like=path)
    said = ", ".join("%s was %s, now %s" % (k, v, wanted[k]) for k, v in was)
    actions.append("edited %s: %s (backup %s%s)" % (path, said, path, BACKUP))
    files.append(path)


def main(argv):
    ours, content, old = argv[0], argv[1], argv[2:]
    wanted = dict(a for a in map(assignment, content.splitlines()) if a)
    actions, files = [], []
    try:
        if not os.path.exists(ours) or read(ours) != content:
            os.makedirs(os.path.dirname(ours), exist_ok=True)
            write(ours, content)
            actions.append("wrote %s (%s)" % (ours, ", ".join("%s = %s" % kv for kv in wanted.items())))
            files.append(ours)
        for path in old:
            if os.path.isfile(path) and read(path).startswith(MARK):
                os.remove(path)
                actions.append("removed %s (replaced by %s)" % (path, ours))
                files.append(path)
        etc = os.path.dirname(ours)
        # systemd-sysctl applies files in name order, so only a name after ours can undo it; procps reads
        # /etc/sysctl.conf after all of them (systemd reads it only through Debian's 99-sysctl.conf link).
        for name, path in sorted(effective_files().items()):
            real = os.path.realpath(path)
            if name <= os.path.basename(ours) or real == os.path.realpath(SYSCTL_CONF):
                continue
            try:
                text = read(path)
            except OSError:
                continue
            if not overruled(text, wanted):
                continue
            if real.startswith("/etc/"):
                edit_in_place(real, text, wanted, actions, files)
                continue
            shadow = os.path.join(etc, name)
            if os.path.islink(shadow):  # a link in /etc to a file we must not edit: keep the link as the backup
                os.rename(shadow, shadow + BACKUP)
            write(shadow, set_to_one(text, wanted), like=real)
            said = ", ".join("%s = %s" % (k, wanted[k]) for k, _ in overruled(text, wanted))
            actions.append("wrote %s: a copy of %s with %s (it overrides that file)" % (shadow, path, said))
            files.append(shadow)
        if os.path.isfile(SYSCTL_CONF):
            text = read(SYSCTL_CONF)
            if overruled(text, wanted):
                edit_in_place(os.path.realpath(SYSCTL_CONF), text, wanted, actions, files)
    except OSError as error:
        print(json.dumps({"actions": actions, "files": files, "error": str(error)}))
        return 1
    print(json.dumps({"actions": actions, "files": files}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
