"""SshTransport: paramiko, host keys verified against known_hosts, never auto-accepted silently.

This is the one place words become a shell line (`shlex.join`), and the one place paramiko is imported.
"""

from __future__ import annotations

import logging
import os
import posixpath
import selectors
import shlex
import socket
import threading
import time
import uuid
from typing import Optional, Union

import paramiko

from deployctl.errors import HostError, HostKeyError
from deployctl.core import Command, Secret
from deployctl.spec.model import Host, SshSettings
from deployctl.transport import Result, stdin_bytes
from deployctl.transport.known_hosts import VerifyPolicy, fingerprint, known_hosts_entry
from deployctl.transport.stream import ChannelStream
from deployctl.transport.tcp import ConnectFailure, await_banner, close_quietly, host_port, seconds, tcp_connect
from deployctl.transport.connect import DEFAULT_CONNECT_TIMEOUT

# paramiko logs connection failures (with tracebacks) from its own threads; we report them as HostError.
_paramiko_log = logging.getLogger("paramiko")
_paramiko_log.addHandler(logging.NullHandler())
_paramiko_log.propagate = False

DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_rsa", "~/.ssh/id_ecdsa")
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
_CHUNK = 65536


def _identity_files(settings: SshSettings) -> list[str]:
    if settings.identity_file:
        return [os.path.expanduser(settings.identity_file)]
    return [p for p in (os.path.expanduser(i) for i in DEFAULT_IDENTITIES) if os.path.exists(p)]


def _parse_jump(jump: str, default_user: str) -> tuple[str, str, int]:
    user, _, rest = jump.rpartition("@")
    address, _, port = rest.partition(":")
    return (user or default_user, address, int(port) if port else 22)


class SshTransport:
    """One SSH connection to one host, reused for every command and file of a run."""

    def __init__(
        self,
        host: Host,
        *,
        accept_new_host_keys: bool = False,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        retries: int = 2,
        cancel: Optional[threading.Event] = None,
    ) -> None:
        self.name = host.name
        self.address = host.address
        self.host = host
        self._accept_new = accept_new_host_keys
        self._cancel = cancel or threading.Event()
        self._sftp: Optional[paramiko.SFTPClient] = None
        self._jump_client: Optional[paramiko.SSHClient] = None
        self._client = self._connect_with_retry(connect_timeout, retries)

    # -- connection -------------------------------------------------------------------------------
    def _new_client(self, host: Host, port: int) -> paramiko.SSHClient:
        known_hosts = os.path.expanduser(host.ssh.known_hosts or DEFAULT_KNOWN_HOSTS)
        client = paramiko.SSHClient()
        if os.path.exists(known_hosts):
            client.load_host_keys(known_hosts)
        client.set_missing_host_key_policy(VerifyPolicy(host, known_hosts, port, self._accept_new))
        return client

    def _connect_with_retry(self, timeout: float, retries: int) -> paramiko.SSHClient:
        """Retry what may pass (refused while sshd restarts, a reset), but never beyond `timeout` in all."""
        deadline = time.monotonic() + timeout
        delay = 0.5
        for attempt in range(retries + 1):
            try:
                return self._connect(deadline, timeout)
            except ConnectFailure as error:
                if not error.transient or attempt == retries or time.monotonic() + delay >= deadline or self._cancel.wait(delay):
                    raise HostError(self.name, error.message, address=self.address) from None
                delay *= 2
        raise AssertionError("unreachable")

    def _connect(self, deadline: float, timeout: float) -> paramiko.SSHClient:
        settings = self.host.ssh
        where = host_port(self.host.address, settings.port)
        if settings.jump:
            sock = self._jump_socket(max(0.1, deadline - time.monotonic()))
        else:
            sock = tcp_connect(self.host.address, settings.port, deadline, timeout, self._cancel)
            await_banner(sock, where, deadline, timeout, self._cancel)
        client = self._new_client(self.host, settings.port)
        keys = _identity_files(settings)
        left = max(0.1, deadline - time.monotonic())
        try:
            client.connect(
                self.host.address,
                port=settings.port,
                username=settings.user,
                key_filename=keys or None,
                look_for_keys=False,
                allow_agent=not settings.identity_file,
                timeout=left,
                banner_timeout=left,
                auth_timeout=left,
                sock=sock,
            )
        except HostKeyError:
            client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostKeyError(
                self.name,
                f"host key CHANGED: got {exc.key.get_name()} {fingerprint(exc.key)}, known_hosts has "
                f"{fingerprint(exc.expected_key)} — refusing (possible man-in-the-middle)",
                address=self.address,
                hint="if the host was reinstalled, remove its old line: "
                + shlex.join(["ssh-keygen", "-R", known_hosts_entry(self.address, settings.port)]),
            ) from None
        except paramiko.AuthenticationException:
            client.close()
            raise HostError(
                self.name,
                f"authentication failed as {settings.user} at {where} (public key)",
                address=self.address,
                hint=f"is the key {keys[0] if keys else '(none found)'} in the host's authorized_keys?",
            ) from None
        except (OSError, socket.timeout, paramiko.SSHException, EOFError) as exc:
            client.close()
            close_quietly(sock)
            if self._cancel.is_set():
                raise HostError(self.name, f"connecting to {where} was interrupted", address=self.address) from None
            if time.monotonic() >= deadline - 0.05 or "No existing session" in str(exc):
                # paramiko gives up on a silent handshake without saying so ("No existing session")
                raise HostError(self.name, f"timed out during the SSH handshake with {where} after "
                                f"{seconds(timeout)} s", address=self.address) from None
            raise HostError(self.name, f"SSH handshake with {where} failed: {exc}", address=self.address) from None
        return client

    def _jump_socket(self, timeout: float):
        settings = self.host.ssh
        user, address, port = _parse_jump(settings.jump or "", settings.user)
        jump_host = Host(name=f"{self.name} via {address}", address=address,
                         ssh=SshSettings(user=user, port=port, identity_file=settings.identity_file,
                                         known_hosts=settings.known_hosts))
        jump = SshTransport(jump_host, accept_new_host_keys=self._accept_new, connect_timeout=timeout, retries=0,
                            cancel=self._cancel)
        self._jump_client = jump._client
        channel = jump._client.get_transport().open_channel(
            "direct-tcpip", (self.host.address, settings.port), ("127.0.0.1", 0), timeout=timeout
        )
        return channel

    # -- Transport ----------------------------------------------------------------------------------
    def run(self, command: Command, *, timeout: Optional[float] = None) -> Result:
        return self.run_streaming(command, None, timeout=timeout)

    def open_stream(self, command: Command) -> ChannelStream:
        """Start a command and hand back its streams, to move bytes in or out (image shipping)."""
        try:
            channel = self._client.get_transport().open_session()
            channel.exec_command(shlex.join(command.argv))
            return ChannelStream(channel, _drain)
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise HostError(self.name, f"connection lost: {exc}", address=self.address,
                            command=command.display()) from None

    def run_streaming(self, command: Command, on_line, *, timeout: Optional[float] = None) -> Result:
        """Run a command; with `on_line`, call on_line(text) for each stderr line as it arrives (progress)."""
        try:
            channel = self._client.get_transport().open_session()
            channel.exec_command(shlex.join(command.argv))
            data = stdin_bytes(command.stdin)
            if data:
                channel.sendall(data)
            channel.shutdown_write()
            on_stderr = _LineSplitter(on_line) if on_line else None
            stdout, stderr = _drain(channel, timeout, on_stderr=on_stderr)
            code = channel.recv_exit_status()
            channel.close()
        except TimeoutError:
            raise HostError(self.name, f"timed out after {timeout} s", address=self.address,
                            command=command.display()) from None
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise HostError(self.name, f"connection lost: {exc}", address=self.address,
                            command=command.display()) from None
        return Result(command.argv, code, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))

    def _sftp_client(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            self._sftp = self._client.open_sftp()
        return self._sftp

    def put(self, path: str, content: Union[bytes, Secret], *, mode: int = 0o644) -> None:
        data = stdin_bytes(content) or b""
        sftp = self._sftp_client()
        directory = posixpath.dirname(path) or "."
        tmp = posixpath.join(directory, f".deployctl-{uuid.uuid4().hex[:12]}")
        try:
            self._makedirs(sftp, directory)
            with sftp.open(tmp, "wb") as handle:
                sftp.chmod(tmp, mode)  # before any byte is written: a secret is never world-readable
                handle.write(data)
            sftp.posix_rename(tmp, path)
        except (OSError, paramiko.SSHException) as exc:
            try:
                sftp.remove(tmp)
            except OSError:
                pass
            raise HostError(self.name, f"cannot write {path}: {exc}", address=self.address) from None

    @staticmethod
    def _makedirs(sftp: paramiko.SFTPClient, directory: str) -> None:
        missing = []
        current = directory
        while current not in ("", "/"):
            try:
                sftp.stat(current)
                break
            except FileNotFoundError:
                missing.append(current)
                current = posixpath.dirname(current)
        for folder in reversed(missing):
            sftp.mkdir(folder)

    def get(self, path: str) -> bytes:
        try:
            with self._sftp_client().open(path, "rb") as handle:
                return handle.read()
        except (OSError, paramiko.SSHException) as exc:
            raise HostError(self.name, f"cannot read {path}: {exc}", address=self.address) from None

    def close(self) -> None:
        for closable in (self._sftp, self._client, self._jump_client):
            if closable is not None:
                try:
                    closable.close()
                except Exception:  # closing a dead connection must never mask the real error
                    pass


class _LineSplitter:
    """Feeds whole lines of a byte stream to a callback."""

    def __init__(self, on_line) -> None:
        self.on_line, self.pending = on_line, b""

    def __call__(self, data: bytes) -> None:
        self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            self.on_line(line.decode("utf-8", "replace"))


def _drain(channel: paramiko.Channel, timeout: Optional[float], on_stderr=None) -> tuple[bytes, bytes]:
    """Read stdout and stderr together until the command exits (no deadlock on full pipes)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    out, err = bytearray(), bytearray()
    # a selector, not select(): select() refuses every descriptor past 1024, which a bench's load generator
    # running beside the telemetry that calls this passes at a few hundred connections
    with selectors.DefaultSelector() as waiter:
        waiter.register(channel, selectors.EVENT_READ)
        while True:
            progressed = False
            while channel.recv_ready():
                out += channel.recv(_CHUNK)
                progressed = True
            while channel.recv_stderr_ready():
                chunk = channel.recv_stderr(_CHUNK)
                err += chunk
                if on_stderr is not None:
                    on_stderr(chunk)
                progressed = True
            if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                if channel.eof_received or channel.closed:
                    break
            if deadline is not None and time.monotonic() > deadline:
                channel.close()
                raise TimeoutError
            if not progressed:
                waiter.select(0.05)
    return bytes(out), bytes(err)
