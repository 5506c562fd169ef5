"""Does each API server finish a one-token generate within a bound? `/health` can stay 200 through an HCCL hang;
this asks the question that matters. One constant script per host, every value an argument; a pure parser."""

from __future__ import annotations

from dataclasses import dataclass

from deployctl.errors import FactParseError
from deployctl.facts.probe import Probe

# args: seconds, the JSON body (empty: a GET), then PORT/PATH words; prints `PORT HTTP_CODE BYTES` per server (000:
# no answer). The servers are asked at once, so a host with several hung servers still answers within one bound.
LIVENESS_SCRIPT = (
    't=$1; b=$2; shift 2; for x in "$@"; do p=${x%%/*}; (printf "%s %s\\n" "$p" "$(curl --silent --output /dev/null '
    '--max-time "$t" --write-out "%{http_code} %{size_download}" ${b:+--header "Content-Type: application/json"} '
    '${b:+--data-binary "$b"} "http://127.0.0.1:$p/${x#*/}")") & done; wait; true'
)


@dataclass(frozen=True)
class Answer:
    """How one server answered the one-token generate."""

    status: int  # 0: nothing within the bound
    size: int
    bodiless: bool = False  # asked by a GET whose bare 200 says one token was generated (SGLang's /health_generate)

    @property
    def generated(self) -> bool:
        """A 200 with a body: an empty 200 is what a broken proxy answers (vllm-ascend #13140); a bodiless
        check's 200 alone."""
        return self.status == 200 and (self.size > 0 or self.bodiless)


def parse_liveness(text: str, bodiless: bool = False) -> dict[int, Answer]:
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        if len(words) != 3 or not all(w.isdigit() for w in words):
            raise FactParseError("one-token generate", number, line, "'PORT HTTP_CODE BYTES'")
        out[int(words[0])] = Answer(int(words[1]), int(words[2]), bodiless)
    return out


def liveness_probe(targets: tuple[tuple[int, str], ...], body: bytes, seconds: float) -> Probe:
    """One generate per (port, path), each bounded by `seconds` (an empty body: a GET of a check that generates)."""
    argv = ("sh", "-c", LIVENESS_SCRIPT, "sh", f"{seconds:g}", body.decode(), *(f"{p}{path}" for p, path in targets))
    parse = parse_liveness if body else _parse_bodiless
    return Probe(argv, parse, "liveness", tool_name="curl", waits_s=seconds)  # all at once


def _parse_bodiless(text: str) -> dict[int, Answer]:
    return parse_liveness(text, bodiless=True)
