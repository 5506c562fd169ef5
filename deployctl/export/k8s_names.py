"""Kubernetes' own rules for the names and values an export writes (pure): each function returns the rule a
value breaks, or None.

They follow k8s.io/apimachinery/pkg/util/validation/validation.go and their callers in
k8s.io/kubernetes/pkg/apis/core/validation/validation.go, so what the API server would refuse at `kubectl apply`
is refused here first, before a file is written."""

from __future__ import annotations

import re
from typing import Optional

from deployctl.spec.image_reference import image_reference_problem
from deployctl.spec.paths import normal

# IsDNS1123Label: namespaces (ValidateNamespaceName), pod and LWS names.
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_LABEL_MAX = 63
# IsDNS1123Subdomain: PersistentVolumeClaims (ValidatePersistentVolumeName), Secrets (ValidateSecretName),
# ConfigMaps, Deployments; also the prefix of a qualified name.
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1123_SUBDOMAIN_MAX = 253
# IsDNS1035Label: Services (ValidateServiceName), which LWS also creates with its own name.
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# IsQualifiedName's name part (qualifiedNameFmt), and IsValidLabelValue (labelValueFmt, may be empty).
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
# v1.DefaultResourceRequestsPrefix: IsExtendedResourceName checks "requests." + the name as a qualified name.
REQUESTS_PREFIX = "requests."
# The kernel's IFNAMSIZ (16, with the terminating NUL): dev_valid_name() in net/core/dev.c.
IFNAME_MAX = 15


def dns1123_label(value: str) -> Optional[str]:
    """IsDNS1123Label."""
    if len(value) > DNS1123_LABEL_MAX or not DNS1123_LABEL.fullmatch(value):
        return (f"must be a DNS-1123 label: at most {DNS1123_LABEL_MAX} lower-case letters, digits and '-', "
                "starting and ending with a letter or digit")
    return None


def dns1123_subdomain(value: str) -> Optional[str]:
    """IsDNS1123Subdomain."""
    if len(value) > DNS1123_SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN.fullmatch(value):
        return (f"must be a DNS-1123 subdomain: at most {DNS1123_SUBDOMAIN_MAX} lower-case letters, digits, '-' "
                "and '.', each dot-separated part starting and ending with a letter or digit")
    return None


def dns1035_label(value: str) -> Optional[str]:
    """IsDNS1035Label (a Service's name)."""
    if len(value) > DNS1123_LABEL_MAX or not DNS1035_LABEL.fullmatch(value):
        return (f"must be a DNS-1035 label: at most {DNS1123_LABEL_MAX} lower-case letters, digits and '-', "
                "starting with a letter and ending with a letter or digit")
    return None


def label_value(value: str) -> Optional[str]:
    """IsValidLabelValue."""
    if len(value) > LABEL_VALUE_MAX or (value and not QUALIFIED_NAME.fullmatch(value)):
        return (f"must be a label value: at most {LABEL_VALUE_MAX} letters, digits, '-', '_' and '.', starting "
                "and ending with a letter or digit")
    return None


def qualified_name(value: str) -> Optional[str]:
    """IsQualifiedName: `[prefix/]name`, the prefix a DNS-1123 subdomain, the name at most 63 characters."""
    parts = value.split("/")
    if len(parts) > 2:
        return "must be a qualified name: an optional DNS subdomain prefix and '/', then a name"
    if len(parts) == 2:
        if not parts[0]:
            return "must be a qualified name: the prefix before '/' is empty"
        broken = dns1123_subdomain(parts[0])
        if broken:
            return f"must be a qualified name: the prefix before '/' {broken}"
    name = parts[-1]
    if not name or len(name) > QUALIFIED_NAME_MAX or not QUALIFIED_NAME.fullmatch(name):
        return (f"must be a qualified name: the name part is at most {QUALIFIED_NAME_MAX} letters, digits, "
                "'-', '_' and '.', starting and ending with a letter or digit")
    return None


def extended_resource_name(value: str) -> Optional[str]:
    """validateContainerResourceName for a device plugin's resource: a qualified name with a domain
    (IsExtendedResourceName: not kubernetes.io's own, not `requests.`-prefixed, `requests.<name>` qualified)."""
    if "/" not in value:
        return "must be an extended resource name: DOMAIN/NAME (e.g. huawei.com/Ascend910)"
    broken = qualified_name(value)
    if broken:
        return broken
    domain = value.split("/")[0]
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return "must be an extended resource name: the kubernetes.io domain holds Kubernetes' native resources"
    if value.startswith(REQUESTS_PREFIX):
        return f"must be an extended resource name: it cannot start with {REQUESTS_PREFIX!r}"
    broken = qualified_name(REQUESTS_PREFIX + value)
    if broken:  # the quota name `requests.<domain>/<name>` must be valid too
        return f"must be an extended resource name: {REQUESTS_PREFIX}{value} {broken}"
    return None


def interface_name(value: str) -> Optional[str]:
    """A Linux network interface name, as dev_valid_name() accepts it: 1 to 15 bytes, not '.' or '..', no '/',
    ':' or whitespace (control characters refused too: the value becomes an env value)."""
    size = len(value.encode("utf-8", "surrogatepass"))
    if not 1 <= size <= IFNAME_MAX or value in (".", ".."):
        return f"must be a network interface name: 1 to {IFNAME_MAX} bytes, not '.' or '..'"
    if any(c in "/:" or c.isspace() or ord(c) < 32 or c == "\x7f" for c in value):
        return "must be a network interface name: no '/', ':', whitespace or control characters"
    return None


def absolute_path(value: str) -> Optional[str]:
    """A hostPath: absolute and normalized (no '.', '..', '//' or trailing '/': validatePathNoBacksteps refuses
    '..'; the others would name the same directory under another spelling), no control characters."""
    if not value.startswith("/"):
        return "must be an absolute path (starting with '/')"
    if any(ord(c) < 32 or c == "\x7f" for c in value):
        return "must be a path without control characters"
    if normal(value) != value:  # the spec's one normal form (spec/paths.py)
        return "must be a normalized path: no '.', '..' or empty parts, no trailing '/'"
    return None


def image(value: str) -> Optional[str]:
    """A container image: Docker's reference grammar (Kubernetes itself refuses leading or trailing spaces)."""
    return image_reference_problem(value)
