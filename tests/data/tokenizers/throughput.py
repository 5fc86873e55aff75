#!/usr/bin/env python3
"""Reference tokenizer throughput: the peer a C++ tokenizer benchmark measures in the same run.

    python throughput.py TOKENIZER_DIR TEXT_FILE THREADS [options]

Encodes every line of TEXT_FILE (newline stripped; empty lines kept) with the Hugging Face
`tokenizers` library (`Tokenizer.from_file(TOKENIZER_DIR/tokenizer.json)` and `encode_batch`),
or, when TOKENIZER_DIR has no tokenizer.json but a tokenizer.model, with `sentencepiece`
(`encode(lines, num_threads=THREADS)`). Prints ONE JSON line, e.g.

    {"library": "tokenizers 0.23.3", "threads": 1, "tokens_per_s": ..., "bytes_per_s": ..., ...}

bytes are the UTF-8 bytes of the lines (newlines excluded); tokens are the ids produced
(with --add-special-tokens, including bos/eos the post-processor adds).

Threads: THREADS=1 sets RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false before
`tokenizers` is imported, so encode_batch runs serially on the calling thread (the printed
cpu_per_wall stays ~1.0 and rayon_threads 1). THREADS=N>1 sets RAYON_NUM_THREADS=N and
TOKENIZERS_PARALLELISM=true. The variables are set by this script; ones already in the
environment are overridden.

Timing: one untimed warm-up pass, then timed passes (at least --repeats, and until
--min-seconds of timed work); the reported rate is the median pass. tokenizers' BPE keeps a
per-Tokenizer word cache (10,000 words) that the warm-up fills; --cold reloads the tokenizer
before every pass (reload not timed) so every pass starts with an empty cache.

Needs Python with `tokenizers` (and `sentencepiece` for .model-only dirs); not needed by CI.
"""

import argparse
import json
import os
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tokenizer_dir")
    p.add_argument("text_file")
    p.add_argument("threads", type=int)
    p.add_argument("--add-special-tokens", action="store_true",
                   help="encode with add_special_tokens=True (default: False)")
    p.add_argument("--fast", action="store_true",
                   help="use Tokenizer.encode_batch_fast (no offsets) instead of encode_batch")
    p.add_argument("--batch-lines", type=int, default=0,
                   help="lines per encode_batch call (default 0: the whole file in one call)")
    p.add_argument("--repeats", type=int, default=3, help="minimum timed passes (default 3)")
    p.add_argument("--min-seconds", type=float, default=1.0,
                   help="keep timing passes until this much timed work (default 1.0)")
    p.add_argument("--cold", action="store_true", help="fresh tokenizer (empty cache) each pass")
    p.add_argument("--lines", type=int, default=0, help="use only the first N lines (0: all)")
    a = p.parse_args()
    if a.threads < 1:
        p.error("threads must be >= 1")
    return a


def main():
    a = parse_args()
    # Must happen before tokenizers is imported (rayon reads it when its pool starts).
    os.environ["RAYON_NUM_THREADS"] = str(a.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if a.threads > 1 else "false"

    with open(a.text_file, encoding="utf-8", newline="") as f:
        lines = f.read().splitlines()
    if a.lines > 0:
        lines = lines[: a.lines]
    n_bytes = sum(len(s.encode("utf-8")) for s in lines)

    tj = os.path.join(a.tokenizer_dir, "tokenizer.json")
    tm = os.path.join(a.tokenizer_dir, "tokenizer.model")
    if os.path.exists(tj):
        import tokenizers
        library = f"tokenizers {tokenizers.__version__}"
        method = "encode_batch_fast" if a.fast else "encode_batch"

        def load():
            return tokenizers.Tokenizer.from_file(tj)

        def run(tok):
            fn = tok.encode_batch_fast if a.fast else tok.encode_batch
            step = a.batch_lines or len(lines) or 1
            total = 0
            for i in range(0, len(lines), step):
                for enc in fn(lines[i:i + step], add_special_tokens=a.add_special_tokens):
                    total += len(enc.ids)
            return total
    elif os.path.exists(tm):
        import sentencepiece as spm
        library = f"sentencepiece {spm.__version__}"
        method = "SentencePieceProcessor.encode(list, num_threads)"

        def load():
            return spm.SentencePieceProcessor(model_file=tm)

        def run(sp):
            step = a.batch_lines or len(lines) or 1
            total = 0
            for i in range(0, len(lines), step):
                out = sp.encode(lines[i:i + step], add_bos=a.add_special_tokens, num_threads=a.threads)
                total += sum(len(x) for x in out)
            return total
    else:
        sys.exit(f"{a.tokenizer_dir}: neither tokenizer.json nor tokenizer.model")

    tok = load()
    n_tokens = run(tok)  # warm-up (also the token count)
    passes = []
    cpu = wall = 0.0
    while len(passes) < a.repeats or sum(passes) < a.min_seconds:
        if a.cold:
            tok = load()
        c0, t0 = time.process_time(), time.perf_counter()
        got = run(tok)
        t1, c1 = time.perf_counter(), time.process_time()
        assert got == n_tokens, (got, n_tokens)
        passes.append(t1 - t0)
        wall += t1 - t0
        cpu += c1 - c0
    med = statistics.median(passes)
    try:
        os_threads = len(os.listdir("/proc/self/task"))
    except OSError:
        os_threads = None
    print(json.dumps({
        "library": library,
        "method": method,
        "tokenizer_dir": a.tokenizer_dir,
        "text_file": a.text_file,
        "threads": a.threads,
        "rayon_threads": a.threads,
        "add_special_tokens": a.add_special_tokens,
        "cold_cache": a.cold,
        "lines": len(lines),
        "bytes": n_bytes,
        "tokens": n_tokens,
        "passes": len(passes),
        "seconds_median": med,
        "seconds_min": min(passes),
        "tokens_per_s": n_tokens / med if med > 0 else None,
        "bytes_per_s": n_bytes / med if med > 0 else None,
        "cpu_per_wall": cpu / wall if wall > 0 else None,
        "process_threads": os_threads,
    }))


if __name__ == "__main__":
    main()
