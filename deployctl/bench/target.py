"""What to load: a base URL as given, or a spec's public endpoint with its served name and deployment facts."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass, field
from typing import Optional

from deployctl.bench.client import BaseUrl
from deployctl.errors import UsageError


@dataclass(frozen=True)
class Target:
    url: BaseUrl
    model: Optional[str]  # the served name, when known without asking the server
    facts: dict = field(default_factory=dict)  # spec digest, image, hosts: recorded in each result
    spec: Optional[object] = None  # the Spec, when the target is one: its hosts can be sampled during the runs


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def spec_endpoint(spec) -> str:
    """The scheduler (disaggregated) or the first instance (mixed), as `up` reports it."""
    from deployctl.plan.verify import endpoint_url

    return endpoint_url(spec)


def spec_facts(spec) -> dict:
    return {"spec": str(spec.source) if spec.source else None, "spec_digest": spec.digest,
            "deployment": spec.name, "image": spec.image.name,
            "hosts": [{"host": h.name, "address": h.address} for h in spec.used_hosts]}


def resolve(text: str) -> Target:
    if is_url(text):
        try:
            return Target(BaseUrl.parse(text), None)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    from deployctl.spec.load import load_spec

    spec = load_spec(text)
    return Target(BaseUrl.parse(spec_endpoint(spec)), spec.model.served_name, spec_facts(spec), spec)


def served_model(url: BaseUrl, timeout: float = 10.0) -> str:
    """The first name in GET /v1/models (used when neither the spec nor --served-model-name gives one)."""
    connection_class = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    connection = connection_class(url.host, url.port, timeout=timeout)
    try:
        connection.request("GET", f"{url.prefix}/v1/models")
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise UsageError(f"{url}/v1/models answered HTTP {response.status}",
                             hint="give the model with --served-model-name")
        return json.loads(body)["data"][0]["id"]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise UsageError(f"cannot learn the served model name from {url}/v1/models: {exc}",
                         hint="give it with --served-model-name") from None
    finally:
        connection.close()
