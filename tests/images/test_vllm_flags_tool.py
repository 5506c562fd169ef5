"""images/standin/tools/vllm_flags.py, the extractor of `vllm serve`'s option strings behind the stand-in's flag
sets, on a miniature vLLM tree written the way vLLM writes its parser (no vLLM install needed, as for the tool)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "images" / "standin" / "tools" / "vllm_flags.py"

FILES = {
    "vllm/entrypoints/openai/cli_args.py": '''
        from dataclasses import field

        @config
        class FrontendArgs:
            host: str | None = None
            port: int = 8000
            allowed_origins: list[str] = field(default_factory=list)
            api_key: list[str] | None = None
            disable_fastapi_docs: bool = False

            @staticmethod
            def add_cli_args(parser):
                from vllm.engine.arg_utils import get_kwargs
                frontend_kwargs = get_kwargs(FrontendArgs)
                del frontend_kwargs["allowed_origins"]["nargs"]
                group = parser.add_argument_group(title="Frontend")
                for key, value in frontend_kwargs.items():
                    group.add_argument(f"--{key.replace('_', '-')}", **value)
                return parser

        def make_arg_parser(parser):
            parser.add_argument("model_tag", type=str, nargs="?")
            parser.add_argument("--headless", action="store_true", default=False)
            parser.add_argument("--api-server-count", "-asc", type=int, default=1)
            parser = FrontendArgs.add_cli_args(parser)
            return parser
    ''',
    "vllm/config/model.py": '''
        ModelDType = Literal["auto", "half"]

        @config
        class ModelConfig:
            model: str = "facebook/opt-125m"
            dtype: ModelDType = "auto"
            enforce_eager: bool = False
            hf_token: bool | str | None = None
            served_model_name: str | list[str] | None = None
            enable_prefix_caching: SkipValidation[bool] = None  # type: ignore
    ''',
    "vllm/engine/arg_utils.py": '''
        class EngineArgs:
            @staticmethod
            def add_cli_args(parser):
                model_kwargs = get_kwargs(ModelConfig)
                group = parser.add_argument_group(title="ModelConfig")
                group.add_argument("--model", **model_kwargs["model"])
                group.add_argument("--dtype", **model_kwargs["dtype"])
                group.add_argument("--enforce-eager", **model_kwargs["enforce_eager"])
                group.add_argument("--hf-token", **model_kwargs["hf_token"])
                group.add_argument("--served-model-name", **model_kwargs["served_model_name"])
                group.add_argument("--enable-prefix-caching", **{**model_kwargs["enable_prefix_caching"],
                                                                 "default": None})
                return parser
    ''',
}


def tree(tmp_path: Path, enable_disable: bool) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    utils = tmp_path / "vllm/utils/argparse_utils.py"
    utils.parent.mkdir(parents=True, exist_ok=True)
    utils.write_text("class EnableDisableAction(BooleanOptionalAction):\n    pass\n" if enable_disable else "\n")
    return tmp_path


def test_option_kinds_follow_vllms_compute_kwargs(tmp_path):
    spec = importlib.util.spec_from_file_location("vllm_flags_tool", TOOL)
    tool = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = tool
    spec.loader.exec_module(tool)
    found = tool.options(tool.Source(str(tree(tmp_path / "old", enable_disable=False))))
    assert found == {
        "-h": "flag", "--help": "flag", "--headless": "flag", "--api-server-count": "value", "-asc": "value",
        "--host": "value", "--port": "value", "--allowed-origins": "value",  # its nargs deleted after get_kwargs
        "--api-key": "list", "--disable-fastapi-docs": "flag", "--no-disable-fastapi-docs": "flag",
        "--model": "value", "--dtype": "value", "--enforce-eager": "flag", "--no-enforce-eager": "flag",
        "--hf-token": "optional", "--served-model-name": "list",
        "--enable-prefix-caching": "flag", "--no-enable-prefix-caching": "flag",  # SkipValidation[bool], **{**...}
    }
    newer = tool.options(tool.Source(str(tree(tmp_path / "new", enable_disable=True))))
    assert newer["--disable-prefix-caching"] == "flag" and newer["--enable-fastapi-docs"] == "flag"


def test_the_command_line_writes_the_stand_ins_data_file_format(tmp_path):
    out = subprocess.run([sys.executable, str(TOOL), f"9.9.9={tree(tmp_path, enable_disable=False)}"],
                         capture_output=True, text=True, check=True).stdout
    doc = json.loads(out)
    assert set(doc) == {"9.9.9"} and set(doc["9.9.9"]) == {"flag", "value", "optional", "list"}
    assert "--enforce-eager" in doc["9.9.9"]["flag"] and doc["9.9.9"]["optional"] == ["--hf-token"]
