#!/bin/sh
# Unpack the AscendCloud zips and install them as the vendor's build_image.sh does (runs inside the build).
set -eu
cd /home/ma-user/AscendCloud
unzip -q AscendCloud-OPP-*.zip -d AscendCloud-OPP
unzip -q AscendCloud-LLM-*.zip -d AscendCloud-LLM
# Operators: the OPP package ships an installer for the CANN opp directory of the base image.
for installer in AscendCloud-OPP/*.run; do
    [ -e "$installer" ] && sh "$installer" --quiet --install-path=/usr/local/Ascend/ascend-toolkit/latest/opp
done
# vLLM with the Ascend patches, from the LLM package's ascend_vllm folder.
cd AscendCloud-LLM/llm_inference/ascend_vllm
pip install --no-cache-dir -r requirements.txt
pip install --no-cache-dir -e .
chown -R ma-user:ma-group /home/ma-user/AscendCloud 2>/dev/null || true
