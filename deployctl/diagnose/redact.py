"""Redaction for the diagnose bundle (pure): every secret the spec knows of, pre-signed URL signatures,
upper-case `NAME=value` pairs whose name says secret, and every `docker inspect` Config.Env value outside a short allow list
of harmless NPU/HCCL variables. Nothing collected reaches the bundle without passing through `redact_text`."""

from __future__ import annotations

import fnmatch
import json
import re
from typing import Iterable, Mapping

from deployctl.core import Secret
from deployctl.spec.model import Spec
from deployctl.spec.secret_names import SECRET_NAME_FRAGMENTS

REDACTED = "<redacted>"

# Config.Env values kept as they are: device slices, NICs, ranktable paths, HCCL timeouts. Anything else may
# be a secret (a token passed through `env:`) and is replaced.
ENV_ALLOW = ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HCCL_IF_IP",
             "*_SOCKET_IFNAME", "HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "HCCL_BUFFSIZE",
             "HCCL_INTRA_ROCE_ENABLE", "HCCL_INTRA_PCIE_ENABLE", "RANK_TABLE_FILE_PATH", "GLOBAL_RANK_TABLE_FILE_PATH",
             "NODE_PORTS", "USE_OPENAI", "PATH", "LD_LIBRARY_PATH")

# A value shorter than this is not looked for in free text (a `${VAR}` holding "1" would blank every digit of the
# bundle); it is still redacted where it is a value: Config.Env, env files, `SECRET_NAME=value` pairs.
MIN_SECRET_LENGTH = 4

# AWS-style credentials of the control machine: S3 weights with `credentials: env` read these.
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")

_PRESIGNED = re.compile(r"(?i)\b(X-Amz-(?:Signature|Credential|Security-Token)|Signature|AWSAccessKeyId)=[^&\s\"']+")
# The names `validate` and `export` take for secrets (one list), matched anywhere in a name here: a bundle
# would rather lose a harmless value than keep a secret.
_SECRET_NAMED = re.compile(r"\b([A-Z0-9_]*(?:" + "|".join(map(re.escape, SECRET_NAME_FRAGMENTS)) + r")[A-Z0-9_]*)"
                           r"(\s*[=:]\s*)(?!<redacted>)([^\s\"',]+)")
_ENV_PAIR = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)=((?:[^"\\]|\\.)*)"')


def secret_values(spec: Spec, environ: Mapping[str, str] = {}, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """Every secret value the spec uses (its `${VAR}` env values, each instance's group env too), the control
    machine's S3 credential variables, and `extra` (credentials of a profile): longest first, none shorter than
    MIN_SECRET_LENGTH.
    The values are revealed here only to be looked for and replaced, never to be shown."""
    found: list[str] = []
    for var in list(spec.env) + [v for i in spec.instances for v in i.env] + [v for h in spec.hooks for v in h.env]:
        if isinstance(var.value, Secret):
            value = var.value.reveal()
            found.append(value.decode(errors="replace") if isinstance(value, bytes) else value)
    found += [environ[name] for name in CREDENTIAL_VARIABLES if environ.get(name)]
    found += list(extra)
    return tuple(sorted({v for v in found if len(v) >= MIN_SECRET_LENGTH}, key=lambda v: (-len(v), v)))


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """Each known secret replaced wherever it appears, then signatures of pre-signed URLs and the values of
    `NAME=value` / `NAME: value` pairs whose name says secret (SECRET_NAME_FRAGMENTS: TOKEN, PASSWORD, ...)."""
    for secret in secrets:  # longest first: a secret containing another is replaced whole
        if secret:
            text = text.replace(secret, REDACTED)
    text = _PRESIGNED.sub(lambda m: f"{m.group(1)}={REDACTED}", text)
    return _SECRET_NAMED.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


def env_allowed(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in ENV_ALLOW)


def redact_env_entry(entry: str) -> str:
    """`NAME=value` -> `NAME=<redacted>` unless NAME is on the allow list."""
    name, sep, _ = entry.partition("=")
    return entry if not sep or env_allowed(name) else f"{name}={REDACTED}"


def redact_inspect(text: str, secrets: Iterable[str]) -> str:
    """`docker inspect` output: Config.Env values replaced (allow list aside), then `redact_text`. Output that
    is not the JSON list docker prints has every quoted `NAME=value` string treated as an env entry."""
    try:
        document = json.loads(text)
        if not isinstance(document, list):
            raise ValueError
    except ValueError:
        masked = _ENV_PAIR.sub(lambda m: '"' + redact_env_entry(f"{m.group(1)}={m.group(2)}") + '"', text)
        return redact_text(masked, secrets)
    for container in document:
        config = container.get("Config") if isinstance(container, dict) else None
        if isinstance(config, dict) and isinstance(config.get("Env"), list):
            config["Env"] = [redact_env_entry(e) if isinstance(e, str) else e for e in config["Env"]]
    return redact_text(json.dumps(document, indent=2) + "\n", secrets)


def env_file_names(names_text: str) -> str:
    """An env file as the bundle holds it: the host sent its variable names only; each becomes NAME=<redacted>."""
    names = [line.strip() for line in names_text.splitlines() if line.strip()]
    return "".join(f"{name}={REDACTED}\n" for name in names)
