"""The package checks: layout, versions, zip-slip, Dockerfile; all before any build."""

from __future__ import annotations

import hashlib

import pytest

from deployctl.errors import ExitStatus
from deployctl.image.package import PackageError, read_package
from tests.image.packages import DOCKERFILE, llm_zip, package, package_name, zip_of


def test_a_good_package_gives_version_digests_and_the_vendor_recipe():
    llm = llm_zip()
    found = read_package(package(llm=llm), package_name())
    assert found.version == "6.3.909"
    assert found.llm_name == "AscendCloud-LLM-6.3.909-xxx-20241010.zip"
    assert found.opp_name == "AscendCloud-OPP-6.3.909-xxx-20241010.zip"
    assert found.llm_sha256 == hashlib.sha256(llm).hexdigest()
    assert dict(found.recipe) == {"marker.txt": b"one\n", "build_image.sh": b"#!/bin/sh\ndocker build .\n",
                                  "Dockerfile": DOCKERFILE}


PROBLEMS = [
    (package(include=("OPP",)), "no AscendCloud-LLM-<version>-*.zip inside"),
    (package(include=("LLM",)), "no AscendCloud-OPP-<version>-*.zip inside"),
    (package(opp_version="6.3.908"), "versions differ: AscendCloud-LLM-6.3.909-xxx-20241010.zip is 6.3.909, "
                                     "AscendCloud-OPP-6.3.908-xxx-20241010.zip is 6.3.908"),
    (package(llm=llm_zip(dockerfile=None)), "no llm_inference/ascend_vllm/Dockerfile"),
    (package(llm=llm_zip(extra={"llm_inference/ascend_vllm/../../../etc/cron.d/x": b"x"})),
     "is a `../` path: it would land outside its folder"),
    (package(llm=llm_zip(extra={"/etc/passwd": b"x"})), "is an absolute path"),
    (package(llm=llm_zip(links={"llm_inference/ascend_vllm/evil": "/etc"})), "is a symbolic link"),
    (package(outer_extra={"../escape.zip": b"x"}), "'../escape.zip' is a `../` path"),
    (b"not a zip", "not a zip file"),
]


# ids from the messages: the zips' bytes hold the time they were made, so ids made of them differ between the two
# xdist workers' collections ("Different tests were collected between gw0 and gw1")
@pytest.mark.parametrize("data, message", PROBLEMS, ids=[message for _, message in PROBLEMS])
def test_each_problem_is_refused_with_exit_2_naming_it(data, message):
    with pytest.raises(PackageError) as caught:
        read_package(data, package_name())
    assert message in caught.value.message
    assert caught.value.exit_status == ExitStatus.SPEC


def test_outer_name_version_must_match_the_inner_zips():
    with pytest.raises(PackageError, match="the package is 6.3.908 but its zips are 6.3.909"):
        read_package(package(), package_name("6.3.908"))


def test_a_recipe_under_a_leading_folder_is_found():
    llm = zip_of({"AscendCloud-LLM/llm_inference/ascend_vllm/Dockerfile": b"FROM x\n"})
    assert dict(read_package(package(llm=llm), package_name()).recipe) == {"Dockerfile": b"FROM x\n"}
