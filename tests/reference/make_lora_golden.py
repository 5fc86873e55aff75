#!/usr/bin/env python3
"""Hand-run oracle: PEFT LoRA adapters + golden training values for two tiny HF models.

NOT run by CI. Regenerate by hand (see tests/reference/README.md, needs `peft` in the venv):

    /tmp/hfvenv/bin/python tests/reference/make_lora_golden.py     # --only llama|gpt2

For each base model `llama` and `gpt2` of tests/data/hf/ (loaded in fp32 with eager
attention exactly as make_hf_golden.py / hf_common.load_fp32 do) writes tests/data/lora/<name>/:
  * initial/  PeftModel.save_pretrained of the freshly made adapter
              (adapter_config.json + adapter_model.safetensors; PEFT's model-card README.md
              is deleted),
  * trained/  the same after 5 AdamW steps,
  * golden.safetensors:
      input_ids, targets  int32 [2,16], the very batch of tests/data/hf/<name>/golden.safetensors
      losses              F32 [5]: loss of step k computed before step k's update, k = 1..5
      logits              F32 [2,16,V]: trained PeftModel (unmerged) on input_ids
      logits_merged       F32 [2,16,V]: merge_and_unload() of the trained model on input_ids
    with versions, LoRA settings and max|logits - logits_merged| in the __metadata__.

Initial adapter: LoraConfig(init_lora_weights=False), then every lora_A / lora_B weight is
re-drawn, in model.named_parameters() order, from one torch.Generator seeded per model
(INIT_SEEDS) as U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = weight.shape[1]
(lora_A [r, in]: in; lora_B [out, r]: r), and every lora_B is then multiplied by 0.1. So B != 0
and step 1 already trains both A and B (with PEFT's default init B = 0 and A gets no gradient
in step 1).

adapter_config.json: PEFT writes target_modules in Python set order (hash-seed dependent); the
script re-executes itself with PYTHONHASHSEED=0 so the file is reproducible. Readers must treat
target_modules as an unordered set.

Training: each step forwards the same batch; loss = mean cross-entropy over all B*T positions
of logits vs targets (targets NOT shifted); backward; torch.optim.AdamW over the trainable
(LoRA) parameters only, lr 1e-2, betas (0.9, 0.999), eps 1e-8, weight_decay 0, no scheduler,
no clipping, fp32, lora_dropout 0.
"""
import argparse
import copy
import json
import math
import os
import shutil
import sys
from pathlib import Path

import peft
import safetensors
import torch
import torch.nn.functional as F
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from hf_common import ATTN, load_fp32, print_file_sizes

REPO = Path(__file__).resolve().parents[2]
HF_DIR = Path("tests") / "data" / "hf"          # relative to REPO: ends up as base_model_name_or_path
DEFAULT_OUT = REPO / "tests" / "data" / "lora"
STEPS = 5
LR, BETAS, EPS, WD = 1e-2, (0.9, 0.999), 1e-8, 0.0
B_SCALE = 0.1

LORA = {
    "llama": dict(r=4, lora_alpha=8, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                  "gate_proj", "up_proj", "down_proj"]),
    # GPT-2 uses Conv1D (weight [in, out]) -> fan_in_fan_out; c_proj matches attn.c_proj and
    # mlp.c_proj. rsLoRA: scaling = 16 / sqrt(4) = 8.
    "gpt2": dict(r=4, lora_alpha=16, use_rslora=True, lora_dropout=0.0, bias="none",
                 task_type="CAUSAL_LM", fan_in_fan_out=True,
                 target_modules=["c_attn", "c_proj", "c_fc"]),
}
INIT_SEEDS = {"llama": 101, "gpt2": 303}


def loss_of(logits, tgt):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))


def redraw_lora(model, seed):
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for every lora_A/lora_B weight; lora_B *= 0.1."""
    g = torch.Generator().manual_seed(seed)
    n = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_A." not in name and ".lora_B." not in name:
                continue
            assert p.dim() == 2, (name, p.shape)
            bound = 1.0 / math.sqrt(p.shape[1])
            u = torch.rand(p.shape, generator=g, dtype=torch.float32)
            w = (u * 2.0 - 1.0) * bound
            if ".lora_B." in name:
                w = w * B_SCALE
            p.copy_(w)
            n += 1
    return n


def save_adapter(model, d):
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    model.save_pretrained(str(d), safe_serialization=True)
    card = d / "README.md"  # PEFT's auto-generated model card: boilerplate, not needed
    if card.exists():
        card.unlink()
    names = sorted(p.name for p in d.iterdir())
    assert names == ["adapter_config.json", "adapter_model.safetensors"], names


def adapter_tensors(d):
    with safe_open(str(d / "adapter_model.safetensors"), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def run_one(name, out_root):
    print(f"== {name}")
    base_rel = HF_DIR / name
    d = out_root / name
    d.mkdir(parents=True, exist_ok=True)

    base, info = load_fp32(base_rel)  # cwd is REPO: name_or_path = "tests/data/hf/<name>"
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(k), f"{name}: {k} = {info.get(k)}"
    hg = load_file(str(REPO / base_rel / "golden.safetensors"))
    ids = hg["input_ids"].long()
    tgt = hg["targets"].long()

    cfg = LoraConfig(init_lora_weights=False, **LORA[name])
    model = get_peft_model(base, cfg)
    nre = redraw_lora(model, INIT_SEEDS[name])
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n, _ in trainable), \
        [n for n, _ in trainable]
    assert len(trainable) == nre, (len(trainable), nre)
    ntrain = sum(p.numel() for _, p in trainable)
    ntotal = sum(p.numel() for p in model.parameters())
    scalings = {float(m.scaling["default"]) for m in model.modules() if hasattr(m, "scaling")
                and isinstance(getattr(m, "scaling"), dict) and "default" in m.scaling}
    print(f"  {len(trainable)} LoRA tensors, {ntrain} trainable of {ntotal} params, "
          f"scaling {sorted(scalings)}")

    # sanity: base logits reproduce the HF golden when the adapter is disabled
    model.eval()
    with torch.no_grad(), model.disable_adapter():
        lg_base = model(input_ids=ids).logits
    # (not asserted bitwise: CPU kernels may differ from the machine that wrote the HF golden)
    bdiff = (lg_base - hg["logits"]).abs().max().item() / hg["logits"].abs().max().item()
    print(f"  adapter disabled vs tests/data/hf golden logits: max rel diff {bdiff:.3e}")
    assert bdiff < 1e-5, bdiff

    save_adapter(model, d / "initial")
    init_sd = {n: p.detach().clone() for n, p in trainable}

    opt = torch.optim.AdamW([p for _, p in trainable], lr=LR, betas=BETAS, eps=EPS,
                            weight_decay=WD)
    model.train()
    losses = []
    for step in range(1, STEPS + 1):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model(input_ids=ids).logits, tgt)
        loss.backward()
        if step == 1:
            zero = [n for n, p in trainable if p.grad is None or not p.grad.abs().max() > 0]
            assert not zero, f"step 1: no gradient for {zero}"
        opt.step()
        losses.append(loss.item())
        print(f"  step {step}: loss {loss.item():.8f}")
    assert all(b < a for a, b in zip(losses, losses[1:])), f"losses do not decrease: {losses}"
    moved = min((p.detach() - init_sd[n]).abs().max().item() for n, p in trainable)
    assert moved > 0, "some LoRA tensor did not move"

    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits.detach().clone()
    final_loss = loss_of(logits, tgt).item()
    save_adapter(model, d / "trained")

    # reload check: the saved trained adapter reproduces the logits bitwise
    base2, _ = load_fp32(base_rel)
    re = PeftModel.from_pretrained(base2, str(d / "trained"))
    re.eval()
    with torch.no_grad():
        lg_re = re(input_ids=ids).logits
    assert torch.equal(lg_re, logits), "reloaded trained adapter changes the logits"

    merged = copy.deepcopy(model).merge_and_unload()
    merged.eval()
    assert not any("lora" in n for n, _ in merged.named_parameters())
    with torch.no_grad():
        logits_merged = merged(input_ids=ids).logits.detach().clone()
    mdiff = (logits - logits_merged).abs().max().item()
    mrel = mdiff / logits.abs().max().item()
    print(f"  final loss {final_loss:.8f}; merged vs unmerged logits max|d| {mdiff:.3e} "
          f"(rel {mrel:.3e}); base vs trained logits max|d| "
          f"{(logits - lg_base).abs().max().item():.3e}")
    assert mrel < 1e-5, mrel

    meta = {
        "model": name,
        "base_dir": str(base_rel),
        "peft_version": peft.__version__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "safetensors_version": safetensors.__version__,
        "attn_implementation": ATTN,
        "dtype": "float32",
        "lora_config": json.dumps(LORA[name], sort_keys=True),
        "lora_scaling": repr(sorted(scalings)[0]) if len(scalings) == 1 else repr(sorted(scalings)),
        "lora_init": (f"init_lora_weights=False, then every lora_A/lora_B weight re-drawn in "
                      f"named_parameters() order from torch.Generator().manual_seed("
                      f"{INIT_SEEDS[name]}) as U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = "
                      f"shape[1]; lora_B then *= {B_SCALE}"),
        "optimizer": (f"torch.optim.AdamW(lora params only, lr={LR}, betas={BETAS}, eps={EPS}, "
                      f"weight_decay={WD}); no scheduler, no clipping"),
        "steps": str(STEPS),
        "B": str(ids.shape[0]), "T": str(ids.shape[1]), "vocab": str(logits.shape[-1]),
        "loss_definition": "mean cross_entropy(logits[B*T,V], targets[B*T]); targets not shifted",
        "losses_definition": "losses[k-1] = loss of step k computed before step k's update",
        "logits_definition": "trained PeftModel (unmerged), eval mode",
        "logits_merged_definition": "merge_and_unload() of the trained PeftModel",
        "final_loss": repr(final_loss),
        "merged_vs_unmerged_max_abs_diff": f"{mdiff:.3e}",
        "merged_vs_unmerged_max_rel_diff": f"{mrel:.3e}",
        "trainable_params": str(ntrain),
        "adapter_disabled_vs_hf_golden_rel_diff": f"{bdiff:.3e}",
    }
    tensors = {
        "input_ids": hg["input_ids"].to(torch.int32).contiguous(),
        "targets": hg["targets"].to(torch.int32).contiguous(),
        "losses": torch.tensor(losses, dtype=torch.float32),
        "logits": logits.to(torch.float32).contiguous(),
        "logits_merged": logits_merged.to(torch.float32).contiguous(),
    }
    save_file(tensors, str(d / "golden.safetensors"), metadata=meta)
    return dict(losses=losses, final=final_loss, mdiff=mdiff, mrel=mrel,
                keys=sorted(adapter_tensors(d / "trained")),
                config=json.loads((d / "trained" / "adapter_config.json").read_text()))


def main():
    # PEFT keeps target_modules as a Python set and writes it to adapter_config.json in set
    # iteration order, which depends on the str hash seed: pin it so the JSON is reproducible.
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable] + sys.argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", choices=sorted(LORA), action="append")
    args = ap.parse_args()
    args.out = args.out.resolve()
    os.chdir(REPO)  # base models are loaded by repo-relative path (see HF_DIR)
    torch.set_num_threads(1)  # deterministic reductions on CPU
    print(f"peft {peft.__version__}  transformers {transformers.__version__}  "
          f"torch {torch.__version__}  safetensors {safetensors.__version__}")
    res = {}
    for name in args.only or list(LORA):
        res[name] = run_one(name, args.out)

    print_file_sizes(args.out)
    print("== summary")
    for name, r in res.items():
        print(f"  {name}: losses {' '.join(f'{x:.6f}' for x in r['losses'])}  "
              f"final {r['final']:.6f}  merged max|d| {r['mdiff']:.3e} (rel {r['mrel']:.3e})")
        print(f"    {len(r['keys'])} adapter keys, e.g. {r['keys'][0]}")


if __name__ == "__main__":
    sys.exit(main())
