"""Acceptance tests of the test bed itself: real SSH, per-host Docker and NPUs, real S3."""

import io
import json
import time
from pathlib import Path

import paramiko
import pytest

from tests.testbed import images, layout

FORMATS = Path(__file__).resolve().parents[1] / "fixtures" / "formats"


def ssh_client(testbed, host, known_hosts=None):
    client = paramiko.SSHClient()
    client.load_host_keys(known_hosts or host.known_hosts)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(host.address, port=host.port, username=host.user, key_filename=host.identity_file,
                   look_for_keys=False, allow_agent=False, timeout=10)
    return client


def ssh_run(client, command):
    _, stdout, stderr = client.exec_command(command, timeout=30)
    out, err = stdout.read(), stderr.read()
    return stdout.channel.recv_exit_status(), out.decode(), err.decode()


def test_ssh_verifies_every_host_key(testbed):
    for host in testbed.hosts:
        with ssh_client(testbed, host) as client:
            assert ssh_run(client, "hostname") == (0, f"{host.name}\n", "")


def test_ssh_refuses_a_host_whose_key_is_unknown(testbed, tmp_path):
    first, second = testbed.hosts[0], testbed.hosts[1]
    # tb2's key filed under tb1's address: tb1 presents a different key -> refused.
    wrong = tmp_path / "known_hosts"
    line = next(l for l in Path(first.known_hosts).read_text().splitlines() if l.startswith(second.address + " "))
    wrong.write_text(first.address + line[len(second.address):] + "\n")
    with pytest.raises(paramiko.BadHostKeyException):
        ssh_client(testbed, first, known_hosts=wrong)
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        ssh_client(testbed, first, known_hosts=empty)


def test_npu_smi_over_ssh_equals_the_sample(testbed):
    host = testbed.hosts[0]
    testbed.set_profile(host.name, device_ips=[f"198.51.100.{11 + n}" for n in range(8)])  # printed data only
    try:
        with ssh_client(testbed, host) as client:
            for case in ("info-910b3-8x64g-healthy-23.0.6", "info-l-8cards", "board-i1-23.0.6"):
                sample = FORMATS / "npu-smi" / case
                code, out, _ = ssh_run(client, (sample / "cmd.txt").read_text().strip())
                assert (code, out) == (0, (sample / "stdout.txt").read_text())
            code, out, _ = ssh_run(client, "hccn_tool -i 0 -ip -g")
            assert (code, out) == (0, (FORMATS / "hccn_tool/ip-g-dev0/stdout.txt").read_text())
            code, out, _ = ssh_run(client, "bash -lc 'command -v npu-smi hccn_tool'")
            assert out == "/usr/local/sbin/npu-smi\n/usr/local/Ascend/driver/tools/hccn_tool\n"
    finally:
        testbed.reset_profile(host.name)
    assert [(call["tool"], call["argv"]) for call in testbed.calls(host.name)[-4:]] == [
        ("npu-smi", ["info"]), ("npu-smi", ["info", "-l"]), ("npu-smi", ["info", "-t", "board", "-i", "1"]),
        ("hccn_tool", ["-i", "0", "-ip", "-g"]),
    ]


def test_profile_change_shows_in_the_tools_and_is_restored(testbed, restore_profiles):
    host = testbed.hosts[1].name
    testbed.set_profile(host, npu_smi_fails=True)
    result = testbed.run_on(host, ["npu-smi", "info"], check=False)
    assert (result.returncode, result.stdout.splitlines()[-1]) == (187, "dcmi module initialize failed. ret is -8005")
    testbed.set_profile(host, npu_smi_fails=False, device_ips=[None] * 8)
    result = testbed.run_on(host, ["/usr/local/Ascend/driver/tools/hccn_tool", "-i", "3", "-ip", "-g"], check=False)
    assert (result.returncode, result.stdout, result.stderr) == (
        13, "", "Get ipconf failed, because no ip was preset there!\n")
    testbed.reset_profile(host)
    result = testbed.run_on(host, ["cat", "/etc/hccn.conf"])
    assert "address_3=10.201.2.13\n" in result.stdout


def test_fake_ping_answers_only_the_bed_hosts_device_ips_with_their_link_up(testbed, restore_profiles):
    def ping(address):
        tool = "/usr/local/Ascend/driver/tools/hccn_tool"
        out = testbed.run_on("tb1", [tool, "-i", "0", "-ping", "-g", "address", address]).stdout
        return out.splitlines()[-1]

    answered, lost = "3 packets transmitted, 3 received, 0.00% packet loss", \
        "3 packets transmitted, 0 received, 100.00% packet loss"
    assert ping("10.201.2.10") == answered  # tb2's NPU 0
    assert ping("10.201.2.99") == lost  # no such NPU
    assert ping("10.200.0.12") == lost  # tb2's host address, not a device IP
    testbed.set_profile("tb2", link={"0": "DOWN"})
    assert ping("10.201.2.10") == lost and ping("10.201.2.11") == answered
    testbed.set_profile("tb2", link={}, device_ips=["10.201.2.50"] + layout.device_ips(2, 8)[1:])
    assert ping("10.201.2.50") == answered and ping("10.201.2.10") == lost


def test_hosts_have_private_etc_dev_and_state(testbed):
    one, two = testbed.hosts[0].name, testbed.hosts[1].name
    testbed.run_on(one, ["sh", "-c", "echo mine > /etc/only-here && echo lock > /var/lib/deployctl/lock"])
    assert testbed.run_on(two, ["ls", "/etc/only-here", "/var/lib/deployctl/lock"], check=False).returncode != 0
    assert not Path("/etc/only-here").exists()
    testbed.run_on(one, ["rm", "/etc/only-here", "/var/lib/deployctl/lock"])


def test_ip_forward_is_per_host(testbed, restore_profiles):
    one, two = testbed.hosts[0].name, testbed.hosts[1].name
    testbed.set_ip_forward(one, 0)
    read = ["cat", "/proc/sys/net/ipv4/ip_forward"]
    assert (testbed.run_on(one, read).stdout, testbed.run_on(two, read).stdout) == ("0\n", "1\n")


def test_docker_on_a_host_binds_its_address_and_sees_its_devices(testbed, restore_profiles):
    host = testbed.hosts[1]
    server = "import http.server as h; h.HTTPServer(('', 18123), h.SimpleHTTPRequestHandler).serve_forever()"
    testbed.docker_on(host.name, "run", "-d", "--init", "--name", "web", "--net=host",
                      "--device", "/dev/davinci7", testbed.base_image, "python3", "-c", server)
    try:
        body = _http_get(f"http://{host.address}:18123/dev/", seconds=10)
        assert "davinci7" in body and "davinci6" not in body
    finally:
        testbed.docker_on(host.name, "rm", "-f", "web")
    testbed.set_profile(host.name, cards=4)
    refused = testbed.docker_on(host.name, "run", "--rm", "--device", "/dev/davinci7", testbed.base_image, "true",
                                check=False)
    assert refused.returncode != 0 and "davinci7" in refused.stderr
    other = testbed.hosts[2].name
    assert testbed.docker_on(other, "run", "--rm", "--device", "/dev/davinci7", testbed.base_image,
                             "true").returncode == 0


def test_docker_over_ssh_talks_to_that_hosts_engine(testbed):
    host = testbed.hosts[1]
    with ssh_client(testbed, host) as client:
        code, out, _ = ssh_run(client, "docker run --rm --net=host " + testbed.base_image + " hostname")
    assert (code, out) == (0, f"{host.name}\n")


def test_s3_multipart_upload_and_ranged_get_from_a_host(testbed):
    from boto3.s3.transfer import TransferConfig

    s3 = testbed.s3
    client = s3.client()
    payload = bytes(range(256)) * (17 * 4096 + 3)  # a little over 17 MiB: two 16 MiB parts
    config = TransferConfig(multipart_threshold=16 * 2**20, multipart_chunksize=16 * 2**20)
    client.upload_fileobj(io.BytesIO(payload), s3.bucket, "bed-check/blob.bin", Config=config)
    try:
        head = client.head_object(Bucket=s3.bucket, Key="bed-check/blob.bin")
        assert (head["ContentLength"], head["ETag"].strip('"').endswith("-2")) == (len(payload), True)
        url = client.generate_presigned_url(
            "get_object", Params={"Bucket": s3.bucket, "Key": "bed-check/blob.bin"}, ExpiresIn=300)
        # From inside tb1's network namespace: only the bridge is reachable there.
        got = testbed.run_on(testbed.hosts[0].name, ["curl", "-sf", "-r", "1000-1999", url], input=b"")
        assert got.stdout == payload[1000:2000]
    finally:
        client.delete_object(Bucket=s3.bucket, Key="bed-check/blob.bin")


def test_s3_refuses_a_bad_secret(testbed):
    import botocore.exceptions

    from tests.testbed.s3 import S3Endpoint

    s3 = testbed.s3
    wrong = S3Endpoint(s3.endpoint, s3.access_key, "not-the-secret", s3.bucket)
    with pytest.raises(botocore.exceptions.ClientError, match="SignatureDoesNotMatch"):
        wrong.client().list_objects_v2(Bucket=s3.bucket)


def test_standin_refuses_a_broken_ranktable(testbed):
    host = testbed.hosts[0]
    if not (images.STANDIN_DIR / "Dockerfile").exists():
        pytest.skip("images/standin/Dockerfile is not written yet")
    work = host.dir / "srv" / "standin-check"
    (work / "model").mkdir(parents=True, exist_ok=True)
    (work / "model" / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    (work / "global.json").write_text("{}")
    (work / "local.json").write_text("{broken")
    name = "standin-refusal"
    testbed.docker_on(host.name, "run", "-d", "--name", name, "--net=host", "--device", "/dev/davinci0",
                      "-v", "/srv/standin-check:/rt:ro",
                      "-e", "GLOBAL_RANK_TABLE_FILE_PATH=/rt/global.json", "-e", "RANK_TABLE_FILE_PATH=/rt/local.json",
                      testbed.standin_image, "python3", "-m", "standin.start_servers",
                      "--model", "/rt/model", "--tensor-parallel-size", "1", "--port", "18124")
    try:
        waited = testbed.docker_on(host.name, "wait", name)
        logs = testbed.docker_on(host.name, "logs", name)
        assert waited.stdout.strip() != "0"
        assert "standin: refusing to start: RANK_TABLE_FILE_PATH=/rt/local.json: not JSON" in logs.stdout + logs.stderr
    finally:
        testbed.docker_on(host.name, "rm", "-f", name, check=False)


def test_every_host_holds_one_standin_image_per_release_sharing_its_layers(testbed):
    versions, newest = images.standin_versions()
    assert {"v0.11.0", newest} <= set(versions)  # at least a v0.11 line and the current line (issue 29)
    host = testbed.hosts[-1].name  # one that loaded the images (or had them seeded), not the builder
    layers = set()
    for version in versions:
        image = layout.standin_image(version)
        fmt = '{{index .Config.Labels "deployctl.standin.version"}} {{json .RootFS.Layers}}'
        label, layer_list = testbed.docker_on(host, "image", "inspect", "--format", fmt, image).stdout.split(" ", 1)
        assert label == version
        layers.add(layer_list.strip())
        played = testbed.docker_on(host, "run", "--rm", image, "python3", "-c",
                                   "import os; from standin.versions import emulated; "
                                   "print(emulated(os.environ).release.name)").stdout.strip()
        assert played == version
    assert len(layers) == 1  # the version is metadata only: every tag is the same bytes on disk
    latest = testbed.docker_on(host, "image", "inspect", "--format", "{{.Id}}", layout.STANDIN_IMAGE).stdout
    assert latest == testbed.docker_on(host, "image", "inspect", "--format", "{{.Id}}",
                                       layout.standin_image(newest)).stdout


def test_the_standin_images_shell_sets_mooncakes_library_path_for_login_and_interactive_shells(testbed):
    host = testbed.hosts[0].name

    def library_path(*argv):
        return testbed.docker_on(host, "run", "--rm", *argv).stdout.strip()

    echo = 'echo "[$LD_LIBRARY_PATH]"'
    assert library_path(testbed.standin_image, "bash", "-c", echo) == "[]"  # vllm-ascend #12059
    assert library_path(testbed.standin_image, "bash", "-lc", echo).endswith(":/usr/local/lib]")
    assert library_path(testbed.standin_image, "bash", "-ic", echo).endswith(":/usr/local/lib]")
    assert library_path("--entrypoint", "sh", testbed.standin_image, "-c", echo) == "[]"


def test_ssh_section_is_what_a_spec_needs(testbed):
    assert testbed.ssh_section() == (
        "ssh:\n  user: root\n  port: 22\n"
        f"  identity_file: {layout.ssh_dir()}/id_ed25519\n  known_hosts: {layout.ssh_dir()}/known_hosts\n"
    )


def _http_get(url, seconds):
    import urllib.request

    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
