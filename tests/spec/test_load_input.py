"""Reading a spec file: bounded, UTF-8 text only, and a bounded number of problems reported."""

from __future__ import annotations

from pathlib import Path

from deployctl.spec.load import MAX_REPORTED, check_spec_file, check_spec_text
from deployctl.spec.yaml12 import MAX_BYTES


def only_error(path) -> str:
    spec, errors, warnings = check_spec_file(path, {})
    assert spec is None and warnings == [] and len(errors) == 1
    return errors[0].render()


def test_dev_zero_is_refused_after_reading_at_most_the_limit():
    assert only_error("/dev/zero") == "/dev/zero:1:1: (root): the spec file is larger than 4 MiB; a spec is a few KiB of YAML"


def test_a_file_over_the_limit_is_refused(tmp_path: Path):
    path = tmp_path / "big.yaml"
    path.write_text("# padding\n" * (MAX_BYTES // 10) + "version: 1\n")
    assert only_error(path) == f"{path}:1:1: (root): the spec file is larger than 4 MiB; a spec is a few KiB of YAML"


def test_a_file_just_under_the_limit_is_read(tmp_path: Path):
    path = tmp_path / "padded.yaml"
    path.write_text("version: 1\n" + "#" * (MAX_BYTES - 12) + "\n")
    assert path.stat().st_size == MAX_BYTES
    assert "larger than" not in check_spec_file(path, {})[1][0].message


def test_invalid_utf8_is_named_with_its_place(tmp_path: Path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("version: 1\nname: caf\u00e9\n".encode("latin-1"))
    assert only_error(path) == f"{path}:2:10: (root): the spec file is not UTF-8 text (byte 0xe9)"


def test_a_nul_byte_is_named_with_its_place(tmp_path: Path):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"version: 1\nname: a\x00b\n")
    assert only_error(path) == f"{path}:2:8: (root): a NUL byte: this is not a text file"


def test_a_directory_is_one_clear_error(tmp_path: Path):
    assert only_error(tmp_path) == f"{tmp_path}: (root): cannot read the spec file: Is a directory"


def test_many_problems_are_cut_after_the_first_ones():
    text = "version: 1\nname: x\nhosts: {n: {address: a}}\nmodel:\n  served_name: m\n  extra_args:\n" + \
        "".join("    - 010\n" for _ in range(3 * MAX_REPORTED))
    _, errors, _ = check_spec_text(text, "s.yaml", None, {})
    assert len(errors) == MAX_REPORTED + 1
    assert errors[0].render() == "s.yaml:1:1: topology: missing required key 'topology'"
    assert errors[1].render() == "s.yaml:7:7: model.extra_args[0]: 010 is ambiguous: write 10 or 8"
    assert errors[-1].render() == f"s.yaml:{7 + MAX_REPORTED - 1}:7: (root): too many problems: only the first " \
                                  f"{MAX_REPORTED} are shown"
