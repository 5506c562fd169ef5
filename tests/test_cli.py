"""The command line: every contract command exists, --help works, unbuilt ones say so."""

import subprocess
import sys

import pytest

from deployctl.cli import build_parser, main

COMMANDS = [
    ["validate"], ["plan"], ["up"], ["down"], ["status"], ["logs"], ["doctor"],
    ["ranktable", "gen"], ["ranktable", "merge"], ["ranktable", "validate"],
    ["image", "build"], ["weights", "sync"], ["bench", "static"], ["bench", "dynamic"], ["schema"],
]


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_every_command_has_help_with_an_example(words, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*words, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "example:" in out and "deployctl " + words[0] in out


def test_unknown_command_is_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["deploy"])
    assert exit_info.value.code == 2


def test_common_flags_before_or_after_the_verb():
    parser = build_parser()
    assert parser.parse_args(["--output", "json", "schema"]).output == "json"
    assert parser.parse_args(["schema", "--output", "json"]).output == "json"
    assert parser.parse_args(["schema"]).output == "table"


def test_help_imports_no_heavy_library():
    code = (
        "import sys; from deployctl.cli import build_parser; build_parser().format_help();"
        "heavy = {'rich', 'paramiko', 'boto3', 'docker', 'jsonschema', 'yaml'} & set(sys.modules);"
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _complete(line: str) -> list[str]:
    """Ask the console entry point for completions the way bash/zsh (argcomplete) do: output on fd 8."""
    import os

    read_fd, write_fd = os.pipe()
    env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line,
           "COMP_POINT": str(len(line)), "_ARGCOMPLETE_SHELL": "bash"}
    code = "import os; os.dup2(%d, 8); from deployctl.cli import main; main()" % write_fd
    subprocess.run([sys.executable, "-c", code], env=env, pass_fds=(write_fd,), capture_output=True, timeout=30)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        return [word.strip() for word in pipe.read().split("\n")]


def test_shell_completion_offers_commands_and_flags():
    assert "ranktable" in _complete("deployctl ra")
    assert {"gen", "merge", "validate"} <= set(_complete("deployctl ranktable "))
    assert "--dry-run" in _complete("deployctl up --dr")


def test_plan_and_up_dry_run_help_say_they_use_ssh_and_validate_is_offline(capsys):
    def help_of(*words):
        with pytest.raises(SystemExit):
            main([*words, "--help"])
        return " ".join(capsys.readouterr().out.split())  # argparse wraps lines

    assert "over SSH" in help_of("plan") and "`validate` is the offline check" in help_of("plan")
    up = help_of("up")
    assert "--dry-run connect over SSH, gather the hosts' facts and print the plan" in up
    assert "(no network)" in help_of("validate")


def _subparsers(parser):
    """Every parser of the tree with its words (`["bench", "static"]`), depth first."""
    import argparse

    yield [], parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                for words, grandchild in _subparsers(child):
                    yield [name, *words], grandchild


def _default_words(default) -> str:
    return " ".join(map(str, default)) if isinstance(default, (list, tuple)) else "%g" % default \
        if isinstance(default, float) else str(default)


def test_every_option_of_every_command_says_what_it_does_and_its_default():
    import argparse

    checked, missing = 0, []
    for words, parser in _subparsers(build_parser()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
                continue
            where = " ".join(["deployctl", *words, *(action.option_strings[:1] or [action.dest])])
            checked += 1
            if not isinstance(action.help, str) or not action.help.strip():
                missing.append(f"{where}: no help")
                continue
            rendered = formatter._expand_help(action)
            default = action.default
            if default in (None, False, argparse.SUPPRESS, "", []):
                continue
            if _default_words(default) not in rendered:
                missing.append(f"{where}: help does not mention its default {default!r}: {rendered!r}")
    assert checked > 100
    assert missing == []


def test_static_bench_defaults_in_help_are_the_ones_used():
    from deployctl.commands.bench import STATIC_DEFAULT_OUTPUT, STATIC_DEFAULT_PROMPT

    static = {" ".join(words): parser for words, parser in _subparsers(build_parser())}["bench static"]
    helps = {a.dest: a.help for a in static._actions}
    assert f"default: {' '.join(map(str, STATIC_DEFAULT_PROMPT))}," in helps["prompt_tokens"]
    assert f"default: {' '.join(map(str, STATIC_DEFAULT_OUTPUT))}," in helps["output_tokens"]


FAILING_COMMANDS = [["plan"], ["status"], ["up", "--yes"], ["down", "--yes"], ["image", "build"],
                    ["weights", "sync"]]


def _spec_on_loopback(tmp_path, device: int = 0):
    """A spec whose one host is a closed port on loopback (connection refused at once)."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    from tests.image.packages import package, package_name

    (tmp_path / package_name()).write_bytes(package())
    path = tmp_path / "spec.yaml"
    path.write_text(
        "version: 1\nname: jsonfail\nplatform: ascend\nserver: vllm\n"
        f"ssh: {{user: root, known_hosts: {tmp_path}/known_hosts, identity_file: {tmp_path}/id}}\n"
        f"hosts:\n  gone: {{address: 127.0.0.1, port: {port}}}\n"
        "image: {name: deployctl/jsonfail:1, build: {base: 'deployctl/no-such-base:9', "
        f"packages: ./{package_name()}}}}}\n"
        "weights: {source: s3://models/tiny/, dest: /srv/weights/tiny}\n"
        "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 16, max_num_batched_tokens: 2048}\n"
        f"topology:\n  mode: mixed\n  instances:\n    - {{host: gone, devices: [{device}], port: 8000}}\n")
    return path, port


def _json_run(*argv):
    import json
    import os

    done = subprocess.run([sys.executable, "-m", "deployctl", *argv, "--output", "json"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    return done.returncode, json.loads(done.stdout), done.stderr  # exactly one document, or this raises


@pytest.mark.parametrize("words", FAILING_COMMANDS, ids=" ".join)
def test_json_output_on_an_invalid_spec_is_one_document_with_the_problems(words, tmp_path):
    path, _ = _spec_on_loopback(tmp_path, device=-1)
    code, doc, err = _json_run(*words, str(path))
    assert code == 2, err
    assert doc["ok"] is False and doc["error"]["type"] == "SpecError" and doc["error"]["exit_code"] == 2
    (problem,) = doc["error"]["problems"]
    assert problem["path"] == "topology.instances[0].devices[0]" and "-1" in problem["message"]
    assert (problem["file"], problem["line"]) == (str(path), 14)
    assert "invalid spec: 1 error" in err  # people still read it on stderr


@pytest.mark.parametrize("words", FAILING_COMMANDS, ids=" ".join)
def test_json_output_on_an_unreachable_host_is_one_document_with_the_error(words, tmp_path):
    path, port = _spec_on_loopback(tmp_path)
    code, doc, err = _json_run(*words, str(path))
    assert code == 1, err
    error = doc["error"]
    assert doc["ok"] is False and error["exit_code"] == 1
    assert error["type"] == "HostError" and error["message"] in err
    assert error["message"] == f"gone (127.0.0.1): cannot connect to 127.0.0.1:{port}: connection refused"
    assert (error["host"], error["address"]) == ("gone", "127.0.0.1")


def test_json_output_of_a_command_that_printed_its_document_is_not_followed_by_an_error_document(tmp_path):
    path, _ = _spec_on_loopback(tmp_path, device=-1)
    code, doc, err = _json_run("validate", str(path))
    assert code == 2 and doc["valid"] is False and "ok" not in doc
