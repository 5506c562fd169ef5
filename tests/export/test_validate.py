"""Every exported object validates: core objects (and every pod template inside a CRD object) with
kubernetes-validate at a pinned Kubernetes version, LeaderWorkerSet and ModelServing against their upstream CRD
schemas (tests/fixtures/export/README.md says where each comes from)."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest

from dataclasses import replace

from deployctl.export.render import export
from tests.export.cases import FIXTURES, exported, load, mapped_cases, options

kubernetes_validate = pytest.importorskip("kubernetes_validate")
KUBERNETES = "1.31"
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


def validate_core(body: dict) -> None:
    kubernetes_validate.validate(body, KUBERNETES, strict=True)


@pytest.mark.parametrize("spec,target", mapped_cases())
def test_every_object_validates(spec, target):
    validate_all(exported(spec, target))


@pytest.mark.parametrize("stack", ("cce", "plain"))  # the default, mindcluster, is every golden file's
@pytest.mark.parametrize("spec,target", [c for c in mapped_cases() if load(c[0]).platform == "ascend"])
def test_every_stack_validates(spec, target, stack):
    validate_all(export(load(spec), replace(options(spec, target), npu_stack=stack)))


def validate_all(manifests) -> None:
    for manifest in manifests:
        body = manifest.body
        if body["kind"] in CRDS:
            errors = sorted(crd_validator(body["kind"]).iter_errors(body), key=lambda e: list(e.path))
            assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
            for template in templates(body):
                validate_core({"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": "template", **template["metadata"]}, "spec": template["spec"]})
        else:
            validate_core(body)


def test_a_broken_object_is_caught_by_each_validator():
    """The validators are not vacuous: a misspelt field fails the core and the CRD check."""
    manifests = exported("playbooks/vllm-ascend-mixed-ep-1host.yaml", "lws")
    lws = json.loads(json.dumps(manifests[0].body))
    lws["spec"]["leaderWorkerTemplate"]["size"] = "two"
    assert list(crd_validator("LeaderWorkerSet").iter_errors(lws))
    service = json.loads(json.dumps(manifests[-1].body))
    service["spec"]["portz"] = service["spec"].pop("ports")
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_core(service)
