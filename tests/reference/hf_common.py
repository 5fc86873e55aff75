"""What the hand-run transformers scripts share: loading a model directory in
fp32 with its loading info, and reading every tensor a directory stores."""
from pathlib import Path

import torch
import transformers
from packaging.version import Version as _ver
from safetensors import safe_open
from transformers import AutoModelForCausalLM

ATTN = "eager"  # plain math reference; also what the fp64 check runs


def load_fp32(path):
    """from_pretrained in fp32 with loading info (handles the torch_dtype->dtype rename)."""
    kw = dict(output_loading_info=True, attn_implementation=ATTN)
    # transformers >= 4.56 renamed torch_dtype -> dtype (older versions would silently
    # store an unknown `dtype` kwarg on the config instead of raising).
    key = "dtype" if _ver(transformers.__version__) >= _ver("4.56") else "torch_dtype"
    kw[key] = torch.float32
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
