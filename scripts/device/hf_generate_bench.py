"""Hugging Face transformers' generate() on a moert checkpoint, the baseline of the device
check (docs/cuda-backend.md): prefill tok/s and batch-1 / batch-B greedy decode tok/s on the
GPU in bf16. Prints one JSON object.

usage: python3 hf_generate_bench.py MODEL_DIR [--batch-sizes 1,32] [--input-len 64] [--output-len 64]
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def timed_generate(model, input_ids, new_tokens):
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=new_tokens,
                   min_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, torch_dtype=torch.bfloat16).cuda().eval()
    vocab = model.config.vocab_size
    results = []
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for batch in [int(b) for b in args.batch_sizes.split(",")]:
            input_ids = torch.randint(1, vocab, (batch, args.input_len), generator=generator).cuda()
            timed_generate(model, input_ids, 2)  # warm-up
            prefill_s = min(timed_generate(model, input_ids, 1) for _ in range(3))
            total_s = min(timed_generate(model, input_ids, args.output_len) for _ in range(2))
            decode_s = max(total_s - prefill_s, 1e-9)
            results.append({"batch": batch, "input_len": args.input_len, "output_len": args.output_len,
                            "prefill_tok_s": batch * args.input_len / prefill_s,
                            "decode_tok_s": batch * (args.output_len - 1) / decode_s,
                            "generate_s": total_s})
    print(json.dumps({"engine": "transformers", "version": __import__("transformers").__version__,
                      "torch": torch.__version__, "results": results}))


if __name__ == "__main__":
    main()
