"""Runs ON A HOST (`python3 -c <this file> < request.json`; stdlib only, Python >= 3.7): sends each serving
path's request at once and prints one JSON line per path: {"name", "status", "size", "text", "error"}.
A P/D pair is asked as vllm-ascend's proxy asks it: the prefill with max_tokens 1 and do_remote_decode, then
the decode with the kv_transfer_params the prefill gave back; or, where the path names the prefill's bootstrap
server, as sglang-router asks SGLang's: the same request with bootstrap_host, bootstrap_port and a random
bootstrap_room to the prefill and the decode at once (each refuses a request without a room, and the prefill
waits for the decode to fetch the KV). The verdict is the control machine's."""

import json
import random
import sys
import threading
import urllib.error
import urllib.request

REMOTE_DECODE = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                 "remote_block_ids": None, "remote_host": None, "remote_port": None}


def post(url, doc, timeout):
    """(status, body bytes); status 0 when nothing came back."""
    request = urllib.request.Request(url, json.dumps(doc).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def text_of(body):
    doc = json.loads(body.decode("utf-8"))
    if "text_output" in doc:
        return doc["text_output"]
    choice = doc["choices"][0]
    return choice["text"] if "text" in choice else choice["message"]["content"]


def error_of(body):
    try:
        doc = json.loads(body.decode("utf-8"))
        error = doc.get("error")
        if isinstance(error, dict) and error.get("message"):
            # vLLM's OpenAI server nests it since 0.10.1: {"error": {"message", "type", "param", "code"}}
            # (vllm-project/vllm #22099); the vendor's api_server and older vLLMs answer it flat
            return str(error["message"])[:300]
        return str(doc.get("message") or error or doc)[:300]
    except (ValueError, AttributeError):
        return body[:300].decode("utf-8", "replace")


def ask(path, timeout):
    out = {"name": path["name"], "status": 0, "size": 0, "text": None, "error": ""}
    body = path["body"]
    try:
        if path.get("bootstrap"):
            return ask_bootstrapped(path, out, timeout)
        if path.get("prefill_url"):
            first = dict(body, max_tokens=1, stream=False, kv_transfer_params=REMOTE_DECODE)
            status, data = post(path["prefill_url"], first, timeout)
            params = json.loads(data.decode("utf-8")).get("kv_transfer_params") if status == 200 and data else None
            if not params:
                out.update(status=status, size=len(data),
                           error="the prefill answered without kv_transfer_params: " + error_of(data))
                return out
            body = dict(body, kv_transfer_params=params)
        return answered(out, *post(path["url"], body, timeout))
    except Exception as error:  # noqa: BLE001 - every failure of one path is that path's answer
        out["error"] = "{}: {}".format(type(error).__name__, error)
    return out


def answered(out, status, data):
    """`out` with what the answering server gave back."""
    out.update(status=status, size=len(data))
    if status != 200:
        out["error"] = error_of(data)
    elif data:
        try:
            out["text"] = text_of(data)
        except (ValueError, KeyError, IndexError, TypeError):
            out["error"] = "no generated text in: " + data[:200].decode("utf-8", "replace")
    return out


def ask_bootstrapped(path, out, timeout):
    """The prefill and the decode at once, one room (sgl-model-gateway's P/D router picks a random u64 room);
    the decode's answer is the path's, a failed prefill its error."""
    host, _, port = path["bootstrap"].rpartition(":")
    body = dict(path["body"], bootstrap_host=host, bootstrap_port=int(port),
                bootstrap_room=random.getrandbits(63))
    prefill = {}

    def ask_prefill():
        try:
            prefill["answer"] = post(path["prefill_url"], body, timeout)
        except Exception as error:  # noqa: BLE001 - said with the decode's answer
            prefill["error"] = "{}: {}".format(type(error).__name__, error)

    thread = threading.Thread(target=ask_prefill)
    thread.start()
    try:
        answered(out, *post(path["url"], body, timeout))
    finally:
        thread.join(timeout)
    status, data = prefill.get("answer", (0, b""))
    if status != 200 and not out["error"]:
        out.update(status=status or 0, text=None,
                   error="the prefill answered " + (("HTTP {}: {}".format(status, error_of(data))) if status
                                                    else prefill.get("error", "nothing")))
    return out


def main():
    request = json.load(sys.stdin)
    lines, lock = [], threading.Lock()

    def run(path):
        result = ask(path, request["timeout"])
        with lock:
            lines.append(json.dumps(result))

    threads = [threading.Thread(target=run, args=(p,)) for p in request["paths"]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
