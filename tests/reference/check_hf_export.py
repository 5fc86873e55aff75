#!/usr/bin/env python3
"""Check that a directory exported by ZeroEngine loads cleanly in Hugging Face transformers.

    python check_hf_export.py EXPORTED_DIR GOLDEN_DIR [--grad-tol 1e-4] [--same-as REF_DIR]
                              [--loss-tol T] [--allow-extra-keys]

Hand-run (not CI). Steps, any failure -> exit 1:
  1. AutoModelForCausalLM.from_pretrained(EXPORTED_DIR, output_loading_info=True, fp32):
     fail on any missing / unexpected / mismatched key (or load error message).
  2. Key set of the exported safetensors file(s) must equal what transformers itself would
     write for this model (save_pretrained of the loaded model). This catches extra keys
     that from_pretrained silently drops (e.g. GPT-2's `attn.bias` is on the model's
     ignore-on-load list, so it never shows up as "unexpected"). --allow-extra-keys turns
     extra keys into a warning. Every stored tensor must also come out of the loader
     unchanged (upcast to fp32), i.e. no load-time conversion touched it.
  3. Runs the golden batch GOLDEN_DIR/golden.safetensors (input_ids, targets) and prints the
     loss (mean cross-entropy over all B*T positions, targets not shifted) next to the
     golden loss. With --loss-tol the difference must be within it.
  4. --same-as REF_DIR: every state_dict tensor must be bitwise equal to the model loaded
     from REF_DIR (zero-step round trip); prints the first differing tensor.
     --grad-tol: with --same-as, also runs backward and checks every parameter gradient
     against GOLDEN_DIR's grad.<name> (max|d| / max|golden| <= tol).
Exit 0 when all good.
"""
import argparse
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from packaging.version import Version as _ver
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from hf_common import ATTN, as_stored, file_tensors, golden_loss, load_fp32


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("exported_dir", type=Path)
    ap.add_argument("golden_dir", type=Path)
    ap.add_argument("--grad-tol", type=float, default=1e-4)
    ap.add_argument("--loss-tol", type=float, default=None)
    ap.add_argument("--same-as", type=Path, default=None, metavar="REF_DIR")
    ap.add_argument("--allow-extra-keys", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}  transformers {transformers.__version__}")
    ok = True

    # 1. load with loading info
    try:
        model, info = load_fp32(args.exported_dir)
    except Exception as e:  # e.g. a shape mismatch raises instead of being reported
        print(f"FAIL: from_pretrained raised {type(e).__name__}: {e}")
        return 1
    model.eval()
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        v = info.get(k)
        print(f"{k}: {sorted(v, key=str) if v else '[]'}")
        if v:
            ok = False
    if not ok:
        print("FAIL: load reported problems")
        return 1

    # 2. strict key set + values unchanged by the loader
    stored = file_tensors(args.exported_dir)
    if not stored:
        print(f"FAIL: no *.safetensors in {args.exported_dir}")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        expected = set(file_tensors(tmp))
    extra = sorted(set(stored) - expected)
    missing = sorted(expected - set(stored))
    dtypes = sorted({str(t.dtype) for t in stored.values()})
    print(f"file: {len(stored)} tensors, dtypes {dtypes}; transformers' own save has {len(expected)}")
    if missing:
        print(f"FAIL: keys transformers would save but the export lacks: {missing}")
        ok = False
    if extra:
        print(f"{'WARN' if args.allow_extra_keys else 'FAIL'}: keys in the export that "
              f"transformers neither needs nor saves (silently ignored on load): {extra}")
        ok = ok and args.allow_extra_keys
    sd = as_stored(model.state_dict(), model)
    for k in sorted(set(stored) & expected):
        if not torch.equal(stored[k].to(torch.float32), sd[k]):
            print(f"FAIL: tensor {k} differs between the file and the loaded model")
            ok = False
            break

    # 3. golden batch
    g = load_file(str(args.golden_dir / "golden.safetensors"))
    ids = g["input_ids"].long()
    tgt = g["targets"].long()
    model.zero_grad(set_to_none=True)
    logits, loss, _ = golden_loss(model, ids, tgt)
    gl = g["loss"].item()
    print(f"loss: {loss.item():.8f}  golden: {gl:.8f}  diff: {abs(loss.item() - gl):.3e}")
    if args.loss_tol is not None and abs(loss.item() - gl) > args.loss_tol:
        print(f"FAIL: loss differs from golden by more than {args.loss_tol}")
        ok = False

    # 4. bitwise round trip (+ grads)
    if args.same_as is not None:
        ref, rinfo = load_fp32(args.same_as)
        rsd = as_stored(ref.state_dict(), ref)
        ks, rks = set(sd), set(rsd)
        if ks != rks:
            print(f"FAIL: state_dict keys differ: only exported {sorted(ks - rks)}, "
                  f"only reference {sorted(rks - ks)}")
            ok = False
        ndiff = 0
        for k in sorted(ks & rks):
            a, b = sd[k], rsd[k]
            if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a, b):
                if ndiff == 0:
                    d = ((a.double() - b.double()).abs().max().item()
                         if a.shape == b.shape else float("nan"))
                    print(f"FAIL: first differing tensor {k}: shape {tuple(a.shape)} vs "
                          f"{tuple(b.shape)}, max|d|={d:.3e}")
                ndiff += 1
        if ndiff:
            print(f"FAIL: {ndiff} of {len(ks & rks)} tensors differ")
            ok = False
        else:
            print(f"same-as: all {len(ks & rks)} state_dict tensors bitwise equal")
        loss.backward()
        worst, wk = 0.0, None
        grads = as_stored({n: p.grad for n, p in model.named_parameters()}, model)
        for n, grad in grads.items():
            key = "grad." + n
            if key not in g:
                print(f"FAIL: no golden gradient {key}")
                ok = False
                continue
            ref_g = g[key]
            den = max(ref_g.abs().max().item(), 1e-30)
            r = (grad.double() - ref_g.double()).abs().max().item() / den
            if r > worst:
                worst, wk = r, n
        print(f"grads: max rel diff vs golden {worst:.3e} ({wk or 'all equal'}), tol {args.grad_tol}")
        if worst > args.grad_tol:
            ok = False

    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
