"""`python -m tests.testbed demo`: a P/D deployment of a tiny model on two test hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

from tests.testbed import layout
from tests.testbed.bed import Testbed

PLAYBOOK = layout.REPO_ROOT / "playbooks" / "demo-pd.yaml"
MODEL_PREFIX = "demo-tiny/"
ENDPOINT = "http://10.200.0.11:9000/v1/chat/completions"


def tiny_model() -> dict:
    """File name -> bytes of a model directory small enough to sync in milliseconds."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256,
              "max_position_embeddings": 4096, "torch_dtype": "float16"}
    tokenizer = {"version": "1.0", "model": {"type": "BPE", "vocab": {chr(c): c for c in range(32, 127)}}}
    header = json.dumps({"w": {"dtype": "F16", "shape": [64, 64], "data_offsets": [0, 8192]}}).encode()
    weights = len(header).to_bytes(8, "little") + header + bytes(8192)  # safetensors layout, zero weights
    return {"config.json": json.dumps(config, indent=2).encode(), "tokenizer.json": json.dumps(tokenizer).encode(),
            "model.safetensors": weights}


def place_tiny_model(bed, name: str = "tiny", hosts=None) -> None:
    """tiny_model() at /srv/weights/<name> on every bed host (or those named), as `weights sync` leaves it: what a
    spec run with `--skip weights` expects there."""
    for host in bed.hosts if hosts is None else [bed.host(h) for h in hosts]:
        target = host.dir / "srv" / "weights" / name
        target.mkdir(parents=True, exist_ok=True)
        for file, data in tiny_model().items():
            (target / file).write_bytes(data)


def run(tear_down: bool = False) -> int:
    bed = Testbed(2).up(2)
    try:
        files = tiny_model()
        client = bed.s3.client()
        for name, data in files.items():
            client.put_object(Bucket=bed.s3.bucket, Key=MODEL_PREFIX + name, Body=data)
        print(f"uploaded {len(files)} files to s3://{bed.s3.bucket}/{MODEL_PREFIX}")
        # The whole flow: checks, weights from S3 to both hosts, ranktables, containers, health, smoke request.
        argv = [sys.executable, "-m", "deployctl", "up", str(PLAYBOOK), "--yes"]
        print("$ " + " ".join(argv[2:]).replace("-m deployctl", "deployctl"), flush=True)
        result = subprocess.run(argv, env={**os.environ, **bed.s3.env()}, capture_output=True, text=True)
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        if result.returncode != 0:
            print(f"demo stopped: `deployctl up` failed (exit {result.returncode}); the test bed is "
                  f"{'down' if tear_down else 'still up'}.", file=sys.stderr)
            return result.returncode or 1
        answer = chat(bed)
        print(f"answer from {ENDPOINT}: {answer}")
        if not tear_down:
            print(next_steps(bed))
        return 0
    finally:
        if tear_down:
            bed.down()


def next_steps(bed: Testbed) -> str:
    """What to run next on the bed, as the README's quick start says: the playbook reads the S3 keys from the
    environment (`weights.credentials: env`), so they are exported from the bed's credentials file first."""
    playbook = PLAYBOOK.relative_to(layout.REPO_ROOT)
    return "\n".join([
        "next, in this shell (the S3 keys stay on this machine; hosts get pre-signed URLs):",
        f"  set -a; . {bed.root}/s3/credentials; set +a",
        *(f"  deployctl {verb} {playbook}" for verb in ("status", "plan", "up")),
        f"  deployctl bench static {playbook} --parallel-num 1 4 --prompt-tokens 128 --output-tokens 32 --epochs 1",
        f"  deployctl down {playbook} --yes",
        "  python -m tests.testbed down",
    ])


def chat(bed: Testbed) -> str:
    body = json.dumps({"model": "demo-tiny", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "Say hello from the test bed."}]}).encode()
    request = urllib.request.Request(ENDPOINT, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["choices"][0]["message"]["content"]
