#!/usr/bin/env bash
# Writes data/gpt2_tokens_train.bin, the llm.c-format token shard that
# configs/gpt2-124m.json trains on: the bytes of the license texts every
# Debian machine has, as tokens 0..255 (GPT-2's BPE vocabulary cannot be
# downloaded here; the model's 50304-entry vocabulary is a superset).
# Usage: scripts/make_gpt2_data.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
mkdir -p data
"$build/runtime/zero-data" bytes-to-llmc --input /usr/share/common-licenses --out data/gpt2_tokens_train.bin
