"""`deployctl image build` on the test bed: a synthetic AscendCloud package built FROM the bed's base image."""

from __future__ import annotations

import pytest

from tests.image.packages import DOCKERFILE, llm_zip, package, package_name

IMAGE = "deployctl/e2e-built:1"
TOPOLOGY = ("topology:\n  mode: mixed\n  instances:\n"
            "    - {host: tb1, devices: [6], port: 8310}\n    - {host: tb2, devices: [6], port: 8311}\n")
MODEL_KEYS = "model: {served_name: tiny, max_model_len: 2048}\n"


def write_spec(bed, deployctl, name, data, where="each-host"):
    (deployctl.tmp_path / package_name()).write_bytes(data)
    extra = (f"image:\n  name: {IMAGE}\n  build: {{base: '{bed.base_image}', packages: {package_name()}, "
             f"where: {where}}}\n" + MODEL_KEYS)
    return deployctl.write(bed.spec_yaml(name, TOPOLOGY, hosts_used=["tb1", "tb2"], extra=extra))


def image_label(bed, host):
    done = bed.docker_on(host, "image", "inspect", "--format", '{{index .Config.Labels "deployctl.inputs"}}',
                         IMAGE, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def remove_image(bed):
    for host in ("tb1", "tb2"):
        bed.docker_on(host, "image", "rm", "--force", IMAGE, check=False)


@pytest.fixture
def clean(bed):
    remove_image(bed)
    yield bed
    remove_image(bed)


def test_each_host_builds_then_skips_then_rebuilds_on_a_changed_input(clean, deployctl):
    bed = clean
    path = write_spec(bed, deployctl, "e2e-img", package())
    code, out, err = deployctl("image", "build", path, "--dry-run")
    assert code == 0, err
    assert "tb1: would build — image missing" in out and "tb2: would build — image missing" in out
    assert image_label(bed, "tb1") is None  # the dry run changed nothing

    code, doc = deployctl.json("image", "build", path)
    assert code == 0, doc
    assert [(h["host"], h["action"]) for h in doc["hosts"]] == [("tb1", "build"), ("tb2", "build")]
    assert doc["image"] == IMAGE and doc["inputs"].startswith("sha256:")
    assert image_label(bed, "tb1") == image_label(bed, "tb2") == doc["inputs"]
    marker = bed.docker_on("tb2", "run", "--rm", IMAGE, "cat", "/opt/ascend_vllm/marker.txt").stdout
    assert marker == "one\n"
    assert (path.parent / ".deployctl/e2e-img/build-logs/tb1.log").read_text()
    first_ids = [h["image_id"] for h in doc["hosts"]]

    code, doc = deployctl.json("image", "build", path)
    assert [(h["host"], h["action"], h["image_id"]) for h in doc["hosts"]] == [
        ("tb1", "skip", first_ids[0]), ("tb2", "skip", first_ids[1])]

    write_spec(bed, deployctl, "e2e-img", package(llm=llm_zip(marker=b"two\n")))
    code, doc = deployctl.json("image", "build", path)
    assert [(h["host"], h["action"]) for h in doc["hosts"]] == [("tb1", "build"), ("tb2", "build")]
    assert bed.docker_on("tb1", "run", "--rm", IMAGE, "cat", "/opt/ascend_vllm/marker.txt").stdout == "two\n"


@pytest.mark.parametrize("data, message", [
    (package(include=("LLM",)), "no AscendCloud-OPP-<version>-*.zip inside"),
    (package(opp_version="6.3.908"), "versions differ"),
    (package(llm=llm_zip(extra={"llm_inference/ascend_vllm/../../x": b"x"})), "is a `../` path"),
], ids=["missing-opp", "version-mismatch", "zip-slip"])
def test_a_bad_package_is_refused_before_any_build(clean, deployctl, data, message):
    bed = clean
    path = write_spec(bed, deployctl, "e2e-img-bad", data)
    code, out, err = deployctl("image", "build", path)
    assert code == 2, err
    assert message in err
    assert image_label(bed, "tb1") is None and image_label(bed, "tb2") is None


def test_a_release_for_another_driver_is_refused_before_any_build(clean, deployctl):
    bed = clean
    path = write_spec(bed, deployctl, "e2e-img-driver", package())
    bed.set_profile("tb2", driver="24.1.0")
    try:
        code, out, err = deployctl("image", "build", path)
    finally:
        bed.reset_profile("tb2")
    assert code == 2, err
    assert "tb2: NPU driver 24.1.0 does not match AscendCloud 6.3.909 (it needs driver 23.0.6)" in err
    assert image_label(bed, "tb1") is None


def test_once_builds_on_the_first_host_and_ships_to_the_other(clean, deployctl):
    bed = clean
    path = write_spec(bed, deployctl, "e2e-img-once", package(), where="once")
    code, out, err = deployctl("image", "build", path, "--dry-run")
    assert "tb1: would build — image missing" in out and "tb2: would ship — image missing: ship from tb1" in out
    code, doc = deployctl.json("image", "build", path)
    assert code == 0, doc
    assert [(h["host"], h["action"]) for h in doc["hosts"]] == [("tb1", "build"), ("tb2", "ship")]
    assert image_label(bed, "tb2") == image_label(bed, "tb1") == doc["inputs"]
    assert doc["hosts"][0]["image_id"] == doc["hosts"][1]["image_id"]
    code, doc = deployctl.json("image", "build", path)
    assert [h["action"] for h in doc["hosts"]] == ["skip", "skip"]


def test_a_base_image_that_cannot_be_had_fails_naming_host_and_image(clean, deployctl):
    bed = clean
    (deployctl.tmp_path / package_name()).write_bytes(package())
    extra = (f"image:\n  name: {IMAGE}\n  build: {{base: 'deployctl/no-such-base:9', packages: {package_name()}}}\n" + MODEL_KEYS)
    path = deployctl.write(bed.spec_yaml("e2e-img-nobase", TOPOLOGY, hosts_used=["tb1", "tb2"], extra=extra))
    code, out, err = deployctl("image", "build", path)
    assert code == 1
    assert "base image deployctl/no-such-base:9 is missing and cannot be pulled" in err and "tb1" in err
    assert image_label(bed, "tb1") is None


def test_up_builds_the_image_as_its_image_stage_then_serves(clean, deployctl):
    bed = clean
    (deployctl.tmp_path / package_name()).write_bytes(package())
    extra = (f"image:\n  name: {IMAGE}\n  build: {{base: '{bed.standin_image}', packages: {package_name()}}}\n"
             "weights: {source: s3://models/tiny/, dest: /srv/weights/tiny}\n"
             "model: {served_name: tiny, max_model_len: 2048, max_num_batched_tokens: 2048}\n")
    path = deployctl.write(bed.spec_yaml("e2e-img-up", TOPOLOGY.replace("8310", "8312").replace("8311", "8313"),
                                         hosts_used=["tb1", "tb2"], extra=extra))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        assert all(i["healthy"] for i in doc["instances"]) and len(doc["smoke"]) == 2
        assert image_label(bed, "tb1") == image_label(bed, "tb2") is not None
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is False
    finally:
        deployctl("down", path, "--yes")


def test_a_failing_docker_build_names_host_and_error_and_leaves_the_old_tag(clean, deployctl):
    """A recipe whose RUN fails (issue 19 item 8): exit 1 naming the host and the build's own error; the name
    keeps pointing at the image built before (docker tags only a finished build), and `up` starts nothing."""
    bed = clean
    path = write_spec(bed, deployctl, "e2e-img-fail", package())
    code, doc = deployctl.json("image", "build", path)
    assert code == 0, doc
    good = {h: image_label(bed, h) for h in ("tb1", "tb2")}
    ids = {h["host"]: h["image_id"] for h in doc["hosts"]}

    failing = DOCKERFILE.decode().replace("COPY marker.txt", "RUN echo recipe-step-broke >&2; exit 3\nCOPY marker.txt")
    write_spec(bed, deployctl, "e2e-img-fail", package(llm=llm_zip(dockerfile=failing.encode())))
    code, out, err = deployctl("image", "build", path)
    assert code == 1, err
    assert "docker build of deployctl/e2e-built:1 failed" in err and "recipe-step-broke" in err
    assert "tb1" in err and "Traceback" not in err
    assert {h: image_label(bed, h) for h in ("tb1", "tb2")} == good
    for host in ("tb1", "tb2"):
        assert bed.docker_on(host, "image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip() == ids[host]

    remove_image(bed)  # now nothing to fall back on: `up` fails at its image stage before any container
    path.write_text(path.read_text() + "weights: {source: s3://models/tiny/, dest: /srv/weights/tiny}\n")
    code, out, err = deployctl("up", path, "--skip", "weights", "--yes")
    assert code == 1 and "recipe-step-broke" in err and "docker build of deployctl/e2e-built:1 failed" in err
    for host in ("tb1", "tb2"):
        assert image_label(bed, host) is None
        assert bed.docker_on(host, "images", "--quiet", IMAGE).stdout.strip() == ""
        assert bed.docker_on(host, "ps", "--all", "--quiet", "--filter", "label=deployctl.deployment=e2e-img-fail"
                             ).stdout.strip() == ""


def test_a_package_from_s3_builds_like_the_same_local_file(clean, deployctl, monkeypatch):
    """`packages: s3://...` (issue 19 item 8) is fetched with the weights' endpoint and credentials; the same
    bytes give the same inputs, so switching to the local copy builds nothing."""
    bed = clean
    key = "e2e-pkg/" + package_name()
    data = package(llm=llm_zip(marker=b"from-s3\n"))
    bed.s3.client().put_object(Bucket=bed.s3.bucket, Key=key, Body=data)
    for name, value in bed.s3.env().items():
        monkeypatch.setenv(name, value)
    try:
        extra = (f"image:\n  name: {IMAGE}\n  build: {{base: '{bed.base_image}', packages: 's3://{bed.s3.bucket}/{key}'}}\n"
                 f"weights: {{source: s3://{bed.s3.bucket}/tiny/, endpoint: {bed.s3.endpoint}}}\n" + MODEL_KEYS)
        path = deployctl.write(bed.spec_yaml("e2e-img-s3", TOPOLOGY, hosts_used=["tb1", "tb2"], extra=extra))
        code, doc = deployctl.json("image", "build", path)
        assert code == 0, doc
        assert [h["action"] for h in doc["hosts"]] == ["build", "build"]
        assert bed.docker_on("tb1", "run", "--rm", IMAGE, "cat", "/opt/ascend_vllm/marker.txt").stdout == "from-s3\n"

        (deployctl.tmp_path / package_name()).write_bytes(data)
        path.write_text(path.read_text().replace(f"'s3://{bed.s3.bucket}/{key}'", package_name()))
        code, again = deployctl.json("image", "build", path)
        assert [h["action"] for h in again["hosts"]] == ["skip", "skip"] and again["inputs"] == doc["inputs"]

        path.write_text(path.read_text().replace(package_name(), f"'s3://{bed.s3.bucket}/e2e-pkg/none.zip'"))
        code, out, err = deployctl("image", "build", path)
        assert code == 1 and f"cannot fetch s3://{bed.s3.bucket}/e2e-pkg/none.zip" in err
        assert bed.s3.secret_key not in out + err
    finally:
        bed.s3.client().delete_object(Bucket=bed.s3.bucket, Key=key)


def test_a_recipe_folder_builds_with_both_zips_beside_its_dockerfile(clean, deployctl):
    """`recipe:` (issue 19 item 8): a folder of our own replaces the vendor's ascend_vllm/; the LLM and OPP zips
    are put beside its Dockerfile, and a change in the folder is a new input."""
    bed = clean
    recipe = deployctl.tmp_path / "recipe"
    recipe.mkdir()
    (recipe / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY AscendCloud-*.zip /opt/zips/\n"
                                       "COPY notes.txt /opt/notes.txt\n")
    (recipe / "notes.txt").write_text("ours\n")
    path = write_spec(bed, deployctl, "e2e-img-recipe", package())
    path.write_text(path.read_text().replace("where: each-host}", "where: once, recipe: recipe}"))
    code, doc = deployctl.json("image", "build", path)
    assert code == 0, doc
    assert [h["action"] for h in doc["hosts"]] == ["build", "ship"]
    listing = bed.docker_on("tb2", "run", "--rm", IMAGE, "ls", "/opt/zips").stdout.split()
    assert listing == ["AscendCloud-LLM-6.3.909-xxx-20241010.zip", "AscendCloud-OPP-6.3.909-xxx-20241010.zip"]
    assert bed.docker_on("tb2", "run", "--rm", IMAGE, "cat", "/opt/notes.txt").stdout == "ours\n"
    assert bed.docker_on("tb1", "run", "--rm", IMAGE, "ls", "/opt/ascend_vllm", check=False).returncode != 0

    (recipe / "notes.txt").write_text("ours, changed\n")
    code, again = deployctl.json("image", "build", path)
    assert [h["action"] for h in again["hosts"]] == ["build", "ship"] and again["inputs"] != doc["inputs"]
