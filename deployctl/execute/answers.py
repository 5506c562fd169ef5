"""Runs the all-pairs answer check: the host program asks every path at once, plan/answers.py judges."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from deployctl.core import Command
from deployctl.errors import HostError
from deployctl.plan.actions import AnswerCheck
from deployctl.plan.answers import judge_answers, parse_answers
from deployctl.transport import Transport


@lru_cache(maxsize=1)
def ask_program() -> str:
    return (Path(__file__).parent / "ask_answers.py").read_text()


def ask_command(check: AnswerCheck) -> Command:
    """`python3 -c PROGRAM`, the paths on stdin."""
    request = {"timeout": check.timeout, "paths": [p.to_json() for p in check.paths]}
    return Command(("python3", "-c", ask_program()), stdin=json.dumps(request).encode())


def run_answer_check(transport: Transport, check: AnswerCheck) -> tuple[str, ...]:
    """The paths' texts agree, or a HostError naming every path that failed."""
    command = ask_command(check)
    result = transport.run(command, timeout=check.timeout * 2 + 30)
    if not result.ok:
        raise HostError(transport.name, f"the answer check could not run (exit code {result.exit_code})",
                        address=transport.address, command="python3 -c <the answer check>",
                        exit_code=result.exit_code, stderr_tail=(result.stderr or result.stdout)[-2000:])
    answers = parse_answers(result.stdout)
    problems = judge_answers(check.paths, answers)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise HostError(transport.name, f"answer check: {problems[0]}{more}", address=transport.address,
                        stderr_tail="\n".join(problems),
                        hint="every serving path must give the same temperature-0 answer; `deployctl logs` the "
                             "containers named")
    return tuple(answers[p.name].text or "" for p in check.paths)
