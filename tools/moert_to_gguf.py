#!/usr/bin/env python3
"""Writes a moert `make-model --arch qwen3_moe` checkpoint (BF16 safetensors) as a llama.cpp GGUF
file of architecture `qwen3moe`, so both engines compute the same weights (bench/vs_llama.sh).

  PYTHONPATH=<llama.cpp source>/gguf-py python3 tools/moert_to_gguf.py MODEL_DIR OUT.gguf

Only the pure-Python `gguf` package of a llama.cpp source tree and numpy are needed (the
upstream converter wants torch). What it writes:
  * every matrix as BF16, unchanged bytes; each layer's routed experts stacked into
    blk.N.ffn_{gate,up,down}_exps [E, rows, cols] (llama.cpp's merged expert tensors); the norm
    weights and the router as F32 (the same values, exactly: llama.cpp's CPU ops want F32 there,
    and its converter writes them so);
  * the hyper-parameters of config.json under the `qwen3moe.` keys (heads, head dim, experts,
    top-k, expert width, RMS epsilon, RoPE base);
  * a vocabulary of `vocab_size` placeholder tokens (tokenizer model "none"): the benchmarks feed
    token ids, never text.
`--shape PATH` prints one line of the model's dimensions, parameter count, the weight MB one
decode token reads and (BF16 checkpoints, any GGUF) the parameters one token's linear layers
multiply, for a moert checkpoint directory or a GGUF file (quantized ones too: element counts do
not change), so a caller can check that both engines run the same model.
"""
import json
import os
import struct
import sys

import numpy as np


def fail(message):
    print(f"moert_to_gguf: {message}", file=sys.stderr)
    sys.exit(2)


def read_headers(model_dir):
    """{tensor name: (file path, data start, dtype, shape, begin, end)} of every safetensors shard."""
    tensors = {}
    for name in sorted(os.listdir(model_dir)):
        if not name.endswith(".safetensors"):
            continue
        path = os.path.join(model_dir, name)
        with open(path, "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(size))
        for tensor, info in header.items():
            if tensor == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            tensors[tensor] = (path, 8 + size, info["dtype"], info["shape"], begin, end)
    if not tensors:
        fail(f"no .safetensors files in {model_dir}")
    return tensors


def load_bf16(entry):
    """A tensor's raw BF16 bits as uint16, memory-mapped (no copy)."""
    path, data_start, dtype, shape, begin, end = entry
    if dtype != "BF16":
        fail(f"{path}: tensor dtype {dtype} (expected BF16: convert the BF16 checkpoint, not a quantized copy)")
    return np.memmap(path, dtype=np.uint16, mode="r", offset=data_start + begin, shape=tuple(shape))


def plan(config, tensors):
    """[(gguf name, [source tensor names], shape)] in writing order; stacked when several sources."""
    if config.get("model_type") != "qwen3_moe":
        fail(f"model_type {config.get('model_type')!r} (only qwen3_moe is mapped)")
    layers = config["num_hidden_layers"]
    experts = config["num_experts"]
    if config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1:
        fail("every layer must be a MoE layer (mlp_only_layers empty, decoder_sparse_step 1)")
    out = [("token_embd.weight", ["model.embed_tokens.weight"])]
    attention = {"attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj", "attn_output": "o_proj",
                 "attn_q_norm": "q_norm", "attn_k_norm": "k_norm"}
    for layer in range(layers):
        p = f"model.layers.{layer}."
        out.append((f"blk.{layer}.attn_norm.weight", [p + "input_layernorm.weight"]))
        for gguf, hf in attention.items():
            out.append((f"blk.{layer}.{gguf}.weight", [p + f"self_attn.{hf}.weight"]))
        out.append((f"blk.{layer}.ffn_norm.weight", [p + "post_attention_layernorm.weight"]))
        out.append((f"blk.{layer}.ffn_gate_inp.weight", [p + "mlp.gate.weight"]))
        for gguf, hf in (("ffn_gate_exps", "gate_proj"), ("ffn_up_exps", "up_proj"), ("ffn_down_exps", "down_proj")):
            out.append((f"blk.{layer}.{gguf}.weight", [p + f"mlp.experts.{e}.{hf}.weight" for e in range(experts)]))
    out.append(("output_norm.weight", ["model.norm.weight"]))
    if "lm_head.weight" in tensors:
        out.append(("output.weight", ["lm_head.weight"]))
    elif not config.get("tie_word_embeddings", False):
        fail("no lm_head.weight and tie_word_embeddings is false")
    used = {source for _, sources in out for source in sources}
    missing = sorted(s for s in used if s not in tensors)
    if missing:
        fail(f"checkpoint lacks {missing[0]} ({len(missing)} tensors missing)")
    extra = sorted(s for s in tensors if s not in used)
    if extra:
        fail(f"checkpoint tensor {extra[0]} has no GGUF mapping ({len(extra)} unmapped)")
    return out


def as_f32(name, shape):
    """The tensors written as F32: vectors (norm weights) and the router."""
    return len(shape) == 1 or name.endswith("ffn_gate_inp.weight")


def shape_of(tensors, sources):
    shape = list(tensors[sources[0]][3])
    for s in sources:
        if list(tensors[s][3]) != shape:
            fail(f"{s} has shape {tensors[s][3]}, expected {shape}")
    return ([len(sources)] + shape) if len(sources) > 1 else shape


def shape_line(dims, num_params, tensor_bytes):
    """tensor_bytes: [(name, bytes)]. Adds the weight bytes one decode token reads (all but the
    embedding; routed experts weighted by top_k / experts) and the parameters one token's linear
    layers multiply (the same weighting, without the embedding and the LM head)."""
    keys = ("layers", "hidden", "heads", "kv_heads", "head_dim", "experts", "top_k", "expert_width", "vocab")
    share = dims["top_k"] / dims["experts"]
    per_token = sum(b * (share if is_expert(n) else 1.0) for n, b in tensor_bytes if not is_embedding(n))
    return " ".join(f"{k}={dims[k]}" for k in keys) + f" params={num_params} mb_per_token={per_token / 1e6:.1f}"


def is_expert(name):
    return ".mlp.experts." in name or "_exps." in name


def is_embedding(name):
    return "embed_tokens" in name or name.startswith("token_embd.")


def is_linear(name):
    return name.endswith("proj.weight") or name.endswith(".gate.weight") or name.endswith("_exps.weight") or \
        any(name.endswith(f"{p}.weight") for p in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_inp"))


def active_linear_params(dims, counts):
    """counts: [(name, elements)] of a BF16 checkpoint or GGUF file."""
    share = dims["top_k"] / dims["experts"]
    return int(sum(c * (share if is_expert(n) else 1.0) for n, c in counts if is_linear(n)))


def checkpoint_shape(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    tensors = read_headers(model_dir)
    dims = {"layers": config["num_hidden_layers"], "hidden": config["hidden_size"],
            "heads": config["num_attention_heads"], "kv_heads": config["num_key_value_heads"],
            "head_dim": config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"],
            "experts": config["num_experts"], "top_k": config["num_experts_per_tok"],
            "expert_width": config["moe_intermediate_size"], "vocab": config["vocab_size"]}
    counts = [(n, int(np.prod(t[3]))) for n, t in tensors.items()]
    line = shape_line(dims, sum(c for _, c in counts), [(n, t[5] - t[4]) for n, t in tensors.items()])
    if all(t[2] == "BF16" for t in tensors.values()):
        line += f" active_linear_params={active_linear_params(dims, counts)}"
    return line


def gguf_shape(path):
    import gguf
    reader = gguf.GGUFReader(path)
    arch = reader.get_field("general.architecture").contents()

    def field(key):
        value = reader.get_field(f"{arch}.{key}")
        if value is None:
            fail(f"{path}: no {arch}.{key}")
        return value.contents()
    dims = {"layers": field("block_count"), "hidden": field("embedding_length"),
            "heads": field("attention.head_count"), "kv_heads": field("attention.head_count_kv"),
            "head_dim": field("attention.key_length"), "experts": field("expert_count"),
            "top_k": field("expert_used_count"), "expert_width": field("expert_feed_forward_length"),
            "vocab": field("vocab_size")}
    counts = [(t.name, int(t.n_elements)) for t in reader.tensors]
    return shape_line(dims, sum(c for _, c in counts), [(t.name, int(t.n_bytes)) for t in reader.tensors]) + \
        f" active_linear_params={active_linear_params(dims, counts)}"


def main(argv):
    usage = "usage: moert_to_gguf.py MODEL_DIR OUT.gguf | moert_to_gguf.py --shape MODEL_DIR_OR_GGUF"
    if len(argv) != 3:
        fail(usage)
    if argv[1] == "--shape":
        path = argv[2]
        if os.path.isdir(path):
            if not os.path.isfile(os.path.join(path, "config.json")):
                fail(f"{path} has no config.json")
            print(checkpoint_shape(path))
        elif os.path.isfile(path):
            try:
                import gguf  # noqa: F401
            except ImportError:
                fail("the gguf package is not importable: set PYTHONPATH=<llama.cpp source>/gguf-py")
            print(gguf_shape(path))
        else:
            fail(f"{path} does not exist")
        return
    model_dir, out_path = argv[1], argv[2]
    config_path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(config_path):
        fail(f"{config_path} does not exist")
    try:
        import gguf
    except ImportError:
        fail("the gguf package is not importable: set PYTHONPATH=<llama.cpp source>/gguf-py")
    with open(config_path) as f:
        config = json.load(f)
    tensors = read_headers(model_dir)
    layout = plan(config, tensors)

    writer = gguf.GGUFWriter(out_path, "qwen3moe")
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    writer.add_name(os.path.basename(os.path.normpath(model_dir)))
    writer.add_context_length(config.get("max_position_embeddings", 4096))
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config.get("intermediate_size", config["moe_intermediate_size"]))
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_expert_count(config["num_experts"])
    writer.add_expert_used_count(config["num_experts_per_tok"])
    writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    writer.add_vocab_size(config["vocab_size"])
    writer.add_tokenizer_model("none")

    num_params = 0
    for name, sources in layout:
        shape = shape_of(tensors, sources)
        count = int(np.prod(shape))
        num_params += count
        if as_f32(name, shape):
            writer.add_tensor_info(name, shape, np.dtype(np.float32), 4 * count)
        else:
            writer.add_tensor_info(name, shape, np.dtype(np.uint16), 2 * count,
                                   raw_dtype=gguf.GGMLQuantizationType.BF16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name, sources in layout:
        if as_f32(name, shape_of(tensors, sources)):
            bits = np.ascontiguousarray(load_bf16(tensors[sources[0]])).astype(np.uint32) << 16
            writer.write_tensor_data(bits.view(np.float32))
        elif len(sources) == 1:
            writer.write_tensor_data(np.ascontiguousarray(load_bf16(tensors[sources[0]])))
        else:
            writer.write_tensor_data(np.stack([load_bf16(tensors[s]) for s in sources]))
    writer.close()
    print(f"wrote {out_path}: {len(layout)} tensors, {num_params} parameters")


if __name__ == "__main__":
    main(sys.argv)
