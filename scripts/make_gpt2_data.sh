#!/usr/bin/env bash
# Writes data/gpt2_train_000000.bin (and data/gpt2_val_000000.bin), the
# llm.c-format token shards configs/gpt2-124m.json trains on: the license
# texts every Debian machine has, tokenized by the GPT-2-style byte-level BPE
# tokenizer in tests/data/tokenizers/gpt2 (2001 ids, trained locally: GPT-2's
# own 50257-id vocabulary cannot be downloaded here; every id fits the
# model's 50304-entry table). With GPT-2's real tokenizer directory, give it
# as TOKENIZER_DIR.
# Usage: scripts/make_gpt2_data.sh [BUILD_DIR] [TOKENIZER_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tokenizer=${2:-tests/data/tokenizers/gpt2}
mkdir -p data
"$build/runtime/zero-data" tokenize --tokenizer "$tokenizer" --input /usr/share/common-licenses --out data/gpt2
