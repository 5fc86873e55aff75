#!/usr/bin/env python3
"""Hand-run oracle for supervised fine-tuning: the loss transformers computes on SFT examples.

NOT run by CI. Regenerate by hand, from the repository root (versions in tests/data/sft/README.md):

    /tmp/hfvenv/bin/python tests/data/sft/make_sft_golden.py

Writes into tests/data/sft/:
  * tokenizer/: a tiny BPE tokenizer trained here (96 ids, so that its ids fit the golden Llama of
    tests/data/hf/llama, whose vocabulary is 96), configured like Mistral's newer tokenizer.json
    (Metaspace "first", no split) with <unk>, and ChatML's markers and SmolLM's chat template;
  * golden.json: for each line of examples.jsonl its ids and labels as TRL builds them, and the
    loss transformers' LlamaForCausalLM(labels=...) gives on them with the weights of
    tests/data/hf/llama, fp32, eager attention:
      - "unpacked": one example per row, right-padded to seq_len with the pad token, attention_mask
        0 on the padding, labels -100 on the prompt, the chat markup and the padding; the loss is
        transformers' shifted mean over the labels that are not -100;
      - "all_tokens": the same rows with every real token labelled (what training without the
        mask would give), to show that the mask matters;
      - "packed": the examples packed by best-fit decreasing into rows of seq_len + 1 tokens (each
        example's first label -100: nothing of it comes before it), plain causal attention over
        the whole row and position ids 0..seq_len-1 running through it: ZeroEngine's packing.

Labels, as TRL's SFTTrainer builds them:
  * {"prompt", "completion"}: ids = tok(prompt + completion) + [eos], trained from len(tok(prompt))
    on (the completion and the eos); the script asserts tok(prompt) is a prefix of the whole;
  * {"messages"}: apply_chat_template(return_assistant_tokens_mask=True) over the chat template
    rewritten with {% generation %} around what the assistant writes (its reply and <|im_end|>);
    the script asserts both templates render the same text.
"""
import json
import re
import sys
from pathlib import Path

import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "reference"))
from hf_common import load_fp32  # noqa: E402

OUT = REPO / "tests" / "data" / "sft"
MODEL = REPO / "tests" / "data" / "hf" / "llama"
SEQ_LEN = 32
VOCAB = 96

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
ALPHABET = list("abcdefghijklmnopqrstuvwxyz") + ["\u2581", "\n", ".", ",", "?", "!"]
# SmolLM's ChatML template (tests/data/tokenizers/smollm), and the same with the assistant's part
# marked for transformers' assistant mask.
TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
            "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
MASK_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
                 "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>' }}"
                 "{% endgeneration %}{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}{{ '\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

CORPUS = [
    "the cat sat on the mat.", "what is the capital of france?", "paris is the capital of france.",
    "say hello to the user.", "hello there, how are you?", "i am fine, thank you.",
    "count to three.", "one, two, three.", "name a color.", "blue is a color.",
    "what is two and two?", "two and two is four.", "tell me a short story.",
    "the dog ran to the park and sat in the sun.",
] + ["user\n", "assistant\n"] * 8  # ChatML's roles, often enough to become single tokens


def train_tokenizer():
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, initial_alphabet=ALPHABET,
                                  limit_alphabet=len(ALPHABET), show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    d = OUT / "tokenizer"
    d.mkdir(parents=True, exist_ok=True)
    tok.save(str(d / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": "<unk>",
        "add_bos_token": False, "clean_up_tokenization_spaces": False, "model_max_length": SEQ_LEN,
        "chat_template": TEMPLATE,
    }
    (d / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"), eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token="<unk>")


def encode(tok, example):
    if "messages" in example:
        plain = tok.apply_chat_template(example["messages"], chat_template=TEMPLATE, tokenize=False)
        marked = tok.apply_chat_template(example["messages"], chat_template=MASK_TEMPLATE, tokenize=False)
        assert plain == marked, (plain, marked)
        out = tok.apply_chat_template(example["messages"], chat_template=MASK_TEMPLATE, tokenize=True,
                                      return_dict=True, return_assistant_tokens_mask=True)
        ids = list(out["input_ids"])
        labels = [i if m else -100 for i, m in zip(ids, out["assistant_masks"])]
        assert ids == tok(plain, add_special_tokens=False)["input_ids"]
        return ids, labels
    prompt_ids = tok(example["prompt"])["input_ids"]
    ids = tok(example["prompt"] + example["completion"])["input_ids"] + [tok.eos_token_id]
    assert ids[:len(prompt_ids)] == prompt_ids, (example, prompt_ids, ids)
    return ids, [-100] * len(prompt_ids) + ids[len(prompt_ids):]


def best_fit_decreasing(lengths, capacity):
    """ZeroEngine's packing (runtime/data/sft_dataset.cc): longest first (ties in file order), each
    into the row with the least room that holds it (ties: the row made first), a row's examples in
    file order, rows in the order of their first example."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    rows, room = [], []
    for e in order:
        fits = [r for r in range(len(rows)) if room[r] >= lengths[e]]
        if not fits:
            rows.append([e])
            room.append(capacity - lengths[e])
            continue
        best = min(fits, key=lambda r: (room[r], r))
        rows[best].append(e)
        room[best] -= lengths[e]
    rows = [sorted(r) for r in rows]
    return sorted(rows, key=lambda r: r[0])


def loss_of(model, rows, pad_id, dtype):
    """rows: [(ids, labels, attention)] each at most SEQ_LEN + 1 long; the last token is only a label."""
    ids = torch.full((len(rows), SEQ_LEN + 1), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), SEQ_LEN + 1), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), SEQ_LEN + 1), dtype=torch.long)
    for r, (i, l) in enumerate(rows):
        ids[r, :len(i)] = torch.tensor(i)
        labels[r, :len(l)] = torch.tensor(l)
        mask[r, :len(i)] = 1
    # transformers shifts: position t predicts labels[t + 1]; the row's last token is only a label.
    model = model.to(dtype)
    with torch.no_grad():
        logits = model(input_ids=ids[:, :SEQ_LEN], attention_mask=mask[:, :SEQ_LEN]).logits
        v = logits.shape[-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, v).double(), labels[:, 1:].reshape(-1),
                                                 ignore_index=-100)
        # The same through transformers' own loss, which shifts inside: given the SEQ_LEN inputs'
        # labels it cannot see a row's last label, so only where that is -100 anyway.
        own = None
        if bool((labels[:, SEQ_LEN] == -100).all()):
            own = model(input_ids=ids[:, :SEQ_LEN], attention_mask=mask[:, :SEQ_LEN],
                        labels=labels[:, :SEQ_LEN]).loss.item()
    return loss.item(), own


def main():
    tok = train_tokenizer()
    lines = [(n, json.loads(l)) for n, l in enumerate((OUT / "examples.jsonl").read_text().splitlines(), start=1)
             if l.strip()]  # (line number in the file, example); a blank line is skipped
    examples = []
    for n, ex in lines:
        ids, labels = encode(tok, ex)
        assert len(ids) <= SEQ_LEN + 1, (n, len(ids))
        assert max(ids) < VOCAB
        examples.append({"line": n, "ids": ids, "labels": labels})
        print(f"line {n}: {len(ids)} tokens, {sum(l != -100 for l in labels[1:])} trained: "
              f"{tok.convert_ids_to_tokens(ids)}")

    model, info = load_fp32(MODEL)
    model.eval()
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(k), f"{k} = {info.get(k)}"
    assert model.config.vocab_size == VOCAB
    pad = tok.pad_token_id

    unpacked = [(e["ids"], e["labels"]) for e in examples]
    all_tokens = [(e["ids"], [-100] + e["ids"][1:]) for e in examples]
    layout = best_fit_decreasing([len(e["ids"]) for e in examples], SEQ_LEN + 1)
    packed = []
    for row in layout:
        ids, labels = [], []
        for i in row:
            ids += examples[i]["ids"]
            labels += [-100] + examples[i]["labels"][1:]
        packed.append((ids, labels))

    golden = {
        "source": f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
                  f"torch {torch.__version__}; model tests/data/hf/llama (fp32, eager attention)",
        "seq_len": SEQ_LEN, "pad_id": pad, "examples": examples,
        "trained_tokens": sum(sum(l != -100 for l in e["labels"][1:]) for e in examples),
    }
    for name, rows in (("unpacked", unpacked), ("all_tokens", all_tokens), ("packed", packed)):
        loss32, own32 = loss_of(model, rows, pad, torch.float32)
        loss64, _ = loss_of(model, rows, pad, torch.float64)
        assert own32 is None or abs(loss32 - own32) < 1e-6 * abs(loss32), (name, loss32, own32)
        golden[name] = {"loss": loss32, "loss_fp64": loss64}
        own = f"{own32:.8f}" if own32 is not None else "not comparable: a row's last label is trained"
        print(f"{name}: loss {loss32:.8f} (transformers' own {own}, fp64 {loss64:.8f})")
    golden["packed"]["rows"] = layout
    text = json.dumps(golden, indent=1)
    # Lists of numbers on one line each.
    text = re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]", lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",") + "]", text)
    (OUT / "golden.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
