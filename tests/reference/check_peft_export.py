#!/usr/bin/env python3
"""Check a LoRA adapter (and/or merged model) exported by ZeroEngine against the PEFT golden.

    python check_peft_export.py --base tests/data/hf/llama --golden tests/data/lora/llama/golden.safetensors
                                [--adapter ADAPTER_DIR] [--merged MERGED_DIR] [--tol 1e-4]

Hand-run (not CI). At least one of --adapter / --merged. Any failure -> exit 1.
  --adapter DIR  a PEFT adapter directory (adapter_config.json + adapter_model.safetensors):
                 PeftModel.from_pretrained(base loaded from --base in fp32, DIR). Fails on a load
                 error and when the file's tensor names differ from what PEFT's save_pretrained
                 writes for that config (PEFT silently ignores unknown names, leaves missing ones
                 at their init, and even accepts names with the adapter name `.default.` left in,
                 which other loaders do not), or when a stored tensor does not come out of the
                 loader unchanged.
  --merged DIR   a full Hugging Face model directory (e.g. merged LoRA):
                 AutoModelForCausalLM.from_pretrained(DIR) in fp32; fails on missing /
                 unexpected / mismatched keys. Warns when its tensor names differ from --base's.
Each model runs the golden input_ids in fp32 with eager attention; prints the max relative
difference of its logits vs the golden `logits` (the trained PeftModel's), i.e.
max|logits - golden| / max|golden|, and the loss (mean cross-entropy over all B*T positions vs
`targets`, not shifted) next to the golden final loss; fails when the difference is above --tol.
Exit 0 when all good.
"""
import argparse
import sys
import tempfile
from pathlib import Path

import peft
import torch
import torch.nn.functional as F
import transformers
from peft import PeftModel
from safetensors import safe_open
from safetensors.torch import load_file

from hf_common import file_tensors, load_fp32


def rel(a, b):
    a = a.double()
    b = b.double()
    den = b.abs().max().item()
    return (a - b).abs().max().item() / (den if den > 0 else 1.0)


def short(names, n=6):
    return str(names[:n])[:-1] + (f", ... {len(names) - n} more]" if len(names) > n else "]")


def report(tag, logits, g, tol):
    r = rel(logits, g["logits"])
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V).float(), g["targets"].long().reshape(-1)).item()
    gl = F.cross_entropy(g["logits"].reshape(-1, V), g["targets"].long().reshape(-1)).item()
    ok = r <= tol
    print(f"{tag}: logits max rel diff vs golden {r:.3e} (tol {tol:g})  loss {loss:.8f} "
          f"golden {gl:.8f}  {'ok' if ok else 'FAIL'}")
    return ok


def check_adapter(args, g, ids):
    from peft.utils import get_peft_model_state_dict
    ok = True
    base, info = load_fp32(args.base)
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        if info.get(k):
            print(f"FAIL: base {args.base}: {k} = {info.get(k)}")
            return False
    f = args.adapter / "adapter_model.safetensors"
    if not f.is_file() or not (args.adapter / "adapter_config.json").is_file():
        print(f"FAIL: {args.adapter} lacks adapter_config.json or adapter_model.safetensors")
        return False
    try:
        model = PeftModel.from_pretrained(base, str(args.adapter))
    except Exception as e:
        print(f"FAIL: PeftModel.from_pretrained raised {type(e).__name__}: {e}")
        return False
    model.eval()
    with safe_open(str(f), framework="pt") as sf:
        stored = {k: sf.get_tensor(k) for k in sf.keys()}
    expected = get_peft_model_state_dict(model)  # what PEFT's save_pretrained would write
    extra = sorted(set(stored) - set(expected))
    missing = sorted(set(expected) - set(stored))
    dtypes = sorted({str(t.dtype) for t in stored.values()})
    print(f"adapter: {len(stored)} tensors, dtypes {dtypes}; PEFT's own save has {len(expected)}")
    if missing:
        print(f"FAIL: {len(missing)} tensor(s) PEFT's save_pretrained writes but the adapter "
              f"lacks (PEFT leaves them at their init): {short(missing)}")
        ok = False
    if extra:
        print(f"FAIL: {len(extra)} tensor(s) in the adapter that PEFT's save_pretrained would "
              f"not write (PEFT ignores or remaps them; other loaders may not): {short(extra)}")
        ok = False
    for k in sorted(set(stored) & set(expected)):
        a, b = stored[k], expected[k]
        if a.shape != b.shape or not torch.equal(a.to(torch.float32), b.to(torch.float32)):
            print(f"FAIL: tensor {k} {tuple(a.shape)} does not load unchanged ({tuple(b.shape)})")
            ok = False
            break
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    return report("adapter", logits, g, args.tol) and ok


def check_merged(args, g, ids):
    ok = True
    try:
        model, info = load_fp32(args.merged)
    except Exception as e:
        print(f"FAIL: from_pretrained raised {type(e).__name__}: {e}")
        return False
    model.eval()
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        v = info.get(k)
        if v:
            print(f"FAIL: merged {k}: {sorted(v, key=str)}")
            ok = False
    if any("lora" in n for n, _ in model.named_parameters()):
        print("FAIL: merged model still has LoRA parameters")
        ok = False
    stored = file_tensors(args.merged)
    if args.base is not None:
        want = set(file_tensors(args.base))
        if set(stored) != want:
            print(f"WARN: merged tensor names differ from {args.base}: only merged "
                  f"{sorted(set(stored) - want)}, only base {sorted(want - set(stored))}")
    print(f"merged: {len(stored)} tensors, dtypes {sorted({str(t.dtype) for t in stored.values()})}")
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    return report("merged", logits, g, args.tol) and ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapter", type=Path, default=None, metavar="DIR")
    ap.add_argument("--merged", type=Path, default=None, metavar="DIR")
    ap.add_argument("--base", type=Path, default=None, metavar="DIR")
    ap.add_argument("--golden", type=Path, required=True, metavar="FILE")
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    if args.adapter is None and args.merged is None:
        ap.error("give --adapter DIR and/or --merged DIR")
    if args.adapter is not None and args.base is None:
        ap.error("--adapter needs --base DIR")
    torch.set_num_threads(1)
    print(f"peft {peft.__version__}  transformers {transformers.__version__}  torch {torch.__version__}")
    g = load_file(str(args.golden))
    ids = g["input_ids"].long()
    ok = True
    if args.adapter is not None:
        ok = check_adapter(args, g, ids) and ok
    if args.merged is not None:
        ok = check_merged(args, g, ids) and ok
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
