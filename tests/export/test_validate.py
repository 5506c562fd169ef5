"""Every exported object validates, for every NPU stack: core objects (and every pod template inside a CRD
object) with kubernetes-validate, strict, at Kubernetes 1.31 and at the newest version it knows; LeaderWorkerSet
and ModelServing against their upstream CRD schemas (tests/fixtures/export/README.md says where each comes
from)."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest

from tests.export.cases import FIXTURES, exported, stacked_cases

kubernetes_validate = pytest.importorskip("kubernetes_validate")
# the oldest release deployctl's objects are pinned to, and the newest the pinned kubernetes-validate knows (asked,
# so that raising its pin in pyproject.toml raises this too)
KUBERNETES = ("1.31", kubernetes_validate.latest_version())
CRDS = {"LeaderWorkerSet": "leaderworkerset-v1.schema.json", "ModelServing": "modelserving-v1alpha1.schema.json"}


@lru_cache(maxsize=None)
def crd_validator(kind: str):
    import jsonschema

    schema = json.loads((FIXTURES / "crds" / CRDS[kind]).read_text())
    return jsonschema.Draft7Validator(schema)


def templates(body: dict) -> list[dict]:
    """The pod templates a CRD object carries."""
    if body["kind"] == "LeaderWorkerSet":
        shape = body["spec"]["leaderWorkerTemplate"]
        return [shape[k] for k in ("leaderTemplate", "workerTemplate") if k in shape]
    return [role[k] for role in body["spec"]["template"]["roles"] for k in ("entryTemplate", "workerTemplate")
            if k in role]


def validate_core(body: dict, version: str = KUBERNETES[0]) -> None:
    kubernetes_validate.validate(body, version, strict=True)


def test_the_newest_version_is_newer_than_the_oldest():
    assert tuple(map(int, KUBERNETES[1].split(".")[:2])) > (1, 31)


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize("spec,target,stack", stacked_cases())
def test_every_object_validates(spec, target, stack, version):
    validate_all(exported(spec, target, stack), version)


def validate_all(manifests, version: str) -> None:
    for manifest in manifests:
        body = manifest.body
        if body["kind"] in CRDS:
            errors = sorted(crd_validator(body["kind"]).iter_errors(body), key=lambda e: list(e.path))
            assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
            for template in templates(body):
                validate_core({"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": "template", **template["metadata"]}, "spec": template["spec"]},
                              version)
        else:
            validate_core(body, version)


def test_a_broken_object_is_caught_by_each_validator():
    """The validators are not vacuous: a misspelt field fails the core and the CRD check."""
    manifests = exported("playbooks/vllm-ascend-mixed-ep-1host.yaml", "lws")
    lws = json.loads(json.dumps(manifests[0].body))
    lws["spec"]["leaderWorkerTemplate"]["size"] = "two"
    assert list(crd_validator("LeaderWorkerSet").iter_errors(lws))
    service = json.loads(json.dumps(manifests[-1].body))
    service["spec"]["portz"] = service["spec"].pop("ports")
    for version in KUBERNETES:
        with pytest.raises(kubernetes_validate.ValidationError):
            validate_core(service, version)


def test_what_the_check_passes_on_every_node_type_validates():
    """Every Ascend playbook on disk (test_mindcluster's glob), on each MindCluster node type it fits, on each
    target that maps its shape: the objects `export --check` passes are valid Kubernetes and CRD objects too."""
    from deployctl.export.options import ExportOptions
    from deployctl.export.render import export
    from tests.export.cases import REFUSED, load
    from tests.export.test_mindcluster import ASCEND_PLAYBOOKS, TARGETS, _flags, _node_types_it_fits

    checked = 0
    for spec in ASCEND_PLAYBOOKS:
        for node_type in _node_types_it_fits(spec):
            for target in (t for t in TARGETS if (spec, t) not in REFUSED):
                validate_all(export(load(spec), ExportOptions(target=target, npu_stack="mindcluster",
                                                              node_type=node_type, **_flags(spec))), KUBERNETES[0])
                checked += 1
    assert checked
