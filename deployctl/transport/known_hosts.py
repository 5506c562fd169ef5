"""Host keys as OpenSSH keeps them: a key not in known_hosts is refused with its fingerprint and the command
that trusts it, or recorded when the user asked for accept-new."""

from __future__ import annotations

import base64
import hashlib
import shlex
from pathlib import Path

import paramiko

from deployctl.errors import HostKeyError
from deployctl.spec.model import Host


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint of a host key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_entry(address: str, port: int) -> str:
    """How OpenSSH names a host in known_hosts: `addr`, or `[addr]:port` off port 22."""
    return address if port == 22 else f"[{address}]:{port}"


class VerifyPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse an unknown key with its fingerprint and the command to trust it; or record it (accept-new)."""

    def __init__(self, host: Host, known_hosts: str, port: int, accept_new: bool) -> None:
        self.host, self.known_hosts, self.port, self.accept_new = host, known_hosts, port, accept_new

    def missing_host_key(self, client, hostname, key) -> None:
        entry = known_hosts_entry(self.host.address, self.port)
        if self.accept_new:
            Path(self.known_hosts).parent.mkdir(parents=True, exist_ok=True)
            with open(self.known_hosts, "a", encoding="utf-8") as handle:
                handle.write(f"{entry} {key.get_name()} {key.get_base64()}\n")
            client.get_host_keys().add(hostname, key.get_name(), key)
            return
        keyscan = shlex.join(["ssh-keyscan", "-p", str(self.port), "-t", _keyscan_type(key), self.host.address])
        raise HostKeyError(
            self.host.name,
            f"unknown host key {key.get_name()} {fingerprint(key)} (not in {self.known_hosts})",
            address=self.host.address,
            hint=f"check the fingerprint with the host's owner, then trust it: {keyscan} >> "
            f"{shlex.quote(self.known_hosts)}   (or re-run with --accept-new-host-keys)",
        )


def _keyscan_type(key: paramiko.PKey) -> str:
    name = key.get_name()
    return {"ssh-ed25519": "ed25519", "ssh-rsa": "rsa"}.get(name, "ecdsa" if "ecdsa" in name else name)
