"""What the hand-run transformers scripts share: loading a model directory in
fp32 with its loading info, and reading every tensor a directory stores."""
from pathlib import Path

import torch
import transformers
from packaging.version import Version as _ver
from safetensors import safe_open
import torch.nn.functional as F
from transformers import AutoModelForCausalLM
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

ATTN = "eager"  # plain math reference; also what the fp64 check runs


def load_fp32(path):
    """from_pretrained in fp32 with loading info (handles the torch_dtype->dtype rename)."""
    kw = dict(output_loading_info=True, attn_implementation=ATTN)
    # transformers >= 4.56 renamed torch_dtype -> dtype (older versions would silently
    # store an unknown `dtype` kwarg on the config instead of raising).
    key = "dtype" if _ver(transformers.__version__) >= _ver("4.56") else "torch_dtype"
    kw[key] = torch.float32
    # Mixtures of experts: the per-expert loop (transformers 5's grouped_mm has no fp64,
    # which the golden script's fp64 check needs).
    if _ver(transformers.__version__) >= _ver("5.0"):
        import json
        if "router_aux_loss_coef" in json.loads((Path(path) / "config.json").read_text()):
            kw["experts_implementation"] = "eager"
    return AutoModelForCausalLM.from_pretrained(str(path), **kw)


def file_tensors(d):
    """All tensors stored in the model's safetensors file(s), by name (golden.safetensors excluded)."""
    out = {}
    for f in sorted(Path(d).glob("*.safetensors")):
        if f.name == "golden.safetensors":
            continue
        with safe_open(str(f), framework="pt") as sf:
            for k in sf.keys():
                if k in out:
                    raise SystemExit(f"FAIL: key {k} stored twice ({f.name})")
                out[k] = sf.get_tensor(k)
    return out


def print_file_sizes(out):
    """Every file under `out` with its size, and the total (what a golden script wrote)."""
    print("== files")
    total = 0
    for f in sorted(out.rglob("*")):
        if f.is_file():
            total += f.stat().st_size
            print(f"  {f.stat().st_size:9d}  {f.relative_to(out)}")
    print(f"  {total:9d}  TOTAL ({total / 1024:.1f} KiB)")


def as_stored(d, model):
    """transformers 5 holds each sparse layer's experts fused (mlp.experts.gate_up_proj
    [E, 2F, C], mlp.experts.down_proj [E, C, F]) and saves them per expert, as the hub's files
    are (Mixtral: block_sparse_moe.experts.<e>.w1 / w3 / w2 and block_sparse_moe.gate; Qwen-MoE:
    mlp.experts.<e>.gate_proj / up_proj / down_proj): `d` (in-memory names) by stored names."""
    if not is_moe(model):
        return d
    mixtral = model.config.model_type == "mixtral"
    out = {}
    for k, t in d.items():
        if ".mlp.experts.gate_up_proj" in k or ".mlp.experts.down_proj" in k:
            base = k.split(".mlp.experts.")[0] + (".block_sparse_moe.experts." if mixtral else ".mlp.experts.")
            for e in range(t.shape[0]):
                if k.endswith("gate_up_proj"):
                    f = t.shape[1] // 2
                    out[f"{base}{e}.{'w1' if mixtral else 'gate_proj'}.weight"] = t[e, :f]
                    out[f"{base}{e}.{'w3' if mixtral else 'up_proj'}.weight"] = t[e, f:]
                else:
                    out[f"{base}{e}.{'w2' if mixtral else 'down_proj'}.weight"] = t[e]
        elif mixtral and ".mlp.gate.weight" in k:
            out[k.replace(".mlp.gate.", ".block_sparse_moe.gate.")] = t
        else:
            out[k] = t
    return out


def is_moe(model):
    return hasattr(model.config, "router_aux_loss_coef")


def golden_loss(model, ids, tgt):
    """The golden loss: mean cross-entropy of the logits against tgt, plus for a mixture of
    experts router_aux_loss_coef x load_balancing_loss_func over the routers' logits (as
    MixtralForCausalLM adds it). Returns logits, loss and the aux loss (None without experts)."""
    moe = is_moe(model)
    out = model(input_ids=ids, output_router_logits=True) if moe else model(input_ids=ids)
    logits = out.logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
    aux = None
    if moe:
        cfg = model.config
        experts = getattr(cfg, "num_local_experts", None) or cfg.num_experts
        aux = load_balancing_loss_func(out.router_logits, experts, cfg.num_experts_per_tok)
        loss = loss + cfg.router_aux_loss_coef * aux
    return logits, loss, aux
