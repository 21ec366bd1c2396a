#!/usr/bin/env python3
"""Float64 reference forward of DeepSeek Sparse Attention models (docs/sparse-attention.md):
DeepSeek-V3.2 (DeepseekV32ForCausalLM) and GLM-5 (GlmMoeDsaForCausalLM), numpy only.

Written from shared/spec/models.md section 2 (DeepSeek-V3: YaRN, MLA, noaux_tc routing) and
shared/spec/models-2026.md sections 2-3 (the lightning indexer), independently of moert's C++.
The whole sequence is recomputed for every generated token (no cache): row i of the output
is the logits after token i.

Usage: dsa_ref_forward.py MODEL_DIR --tokens 1,2,3 -n 8 --out PREFIX
writes PREFIX.json (prompt_tokens, gen_tokens, dsa_margin), PREFIX.prompt_logits.npy and
PREFIX.gen_logits.npy (float32), as shared/reference does.
"""
import argparse
import json
import math
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        if info["dtype"] == "BF16":
            v = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            v = v.view(np.float32)
        elif info["dtype"] == "F32":
            v = np.frombuffer(raw, dtype=np.float32)
        else:
            sys.exit("tensor %s: dtype %s is not BF16 or F32" % (name, info["dtype"]))
        out[name] = v.astype(np.float64).reshape(info["shape"])
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layer_norm(x, w, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def yarn_mscale(s, c):
    return 1.0 if s <= 1 else 0.1 * c * math.log(s) + 1.0


def rope_frequencies(cfg, d):
    """inv'_j (j < d/2) and the cos/sin factor a (shared/spec/models.md section 1)."""
    rp = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    theta = float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    kind = rp.get("rope_type", rp.get("type", "default"))
    if kind != "yarn":
        return inv, 1.0
    s = float(rp["factor"])
    l0 = float(rp.get("original_max_position_embeddings", cfg["max_position_embeddings"]))
    bf, bs = float(rp.get("beta_fast", 32)), float(rp.get("beta_slow", 1))

    def corr(r):
        return d * math.log(l0 / (2 * math.pi * r)) / (2 * math.log(theta))

    lo, hi = corr(bf), corr(bs)
    if rp.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if lo == hi:
        hi += 0.001
    ramp = np.clip((np.arange(d // 2) - lo) / (hi - lo), 0, 1)
    inv = inv / s * ramp + inv * (1 - ramp)
    if rp.get("attention_factor"):
        a = float(rp["attention_factor"])
    elif rp.get("mscale") and rp.get("mscale_all_dim"):
        a = yarn_mscale(s, rp["mscale"]) / yarn_mscale(s, rp["mscale_all_dim"])
    else:
        a = yarn_mscale(s, 1.0)
    return inv, a


def rope(x, positions, inv, a, interleaved):
    """Rotates the last axis (d channels) of x [T, ..., d] at positions [T]."""
    ang = positions[:, None] * inv[None, :]  # [T, d/2]
    shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (inv.shape[0],)
    cos, sin = (np.cos(ang) * a).reshape(shape), (np.sin(ang) * a).reshape(shape)
    y = x.copy()
    if interleaved:  # pairs (2j, 2j+1)
        e, o = x[..., 0::2], x[..., 1::2]
        y[..., 0::2], y[..., 1::2] = e * cos - o * sin, e * sin + o * cos
    else:  # rotate-half: pairs (j, j + d/2)
        h = inv.shape[0]
        f, s = x[..., :h], x[..., h:]
        y[..., :h], y[..., h:] = f * cos - s * sin, f * sin + s * cos
    return y


def silu(x):
    return x / (1 + np.exp(-x))


class Model:
    def __init__(self, model_dir):
        self.cfg = json.load(open(model_dir + "/config.json"))
        try:  # sharded (model.safetensors.index.json) or one file
            shards = sorted(set(json.load(open(model_dir + "/model.safetensors.index.json"))["weight_map"].values()))
        except FileNotFoundError:
            shards = ["model.safetensors"]
        self.w = {}
        for shard in shards:
            self.w.update(read_safetensors(model_dir + "/" + shard))
        c = self.cfg
        self.arch = c["architectures"][0]
        if self.arch not in ("DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM"):
            sys.exit("unsupported architecture " + self.arch)
        self.glm = self.arch == "GlmMoeDsaForCausalLM"
        self.dn, self.dr, self.dv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        self.dc, self.nh = c["kv_lora_rank"], c["num_attention_heads"]
        self.ni, self.di, self.topk = c["index_n_heads"], c["index_head_dim"], c["index_topk"]
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        # GLM-5: Hugging Face builds q_a / kv_a norms without eps (1e-6); V3.2 uses the config's.
        self.latent_eps = 1e-6 if self.glm else self.eps
        self.inv, self.a = rope_frequencies(c, self.dr)
        self.mla_interleaved = c.get("rope_interleave", True)
        # Indexer pairing: GLM-5 interleaved (config key), V3.2 rotate-half (no key).
        self.idx_interleaved = c.get("indexer_rope_interleave", self.glm)
        scale = (self.dn + self.dr) ** -0.5
        rp = c.get("rope_scaling") or c.get("rope_parameters") or {}
        if rp.get("rope_type", rp.get("type")) == "yarn" and rp.get("mscale_all_dim"):
            scale *= yarn_mscale(float(rp["factor"]), rp["mscale_all_dim"]) ** 2
        self.scale = scale
        # Smallest K-th vs (K+1)-th index score gap where they differ, and the rows where they
        # are equal (exact ties, mostly all-zero scores after the ReLU: the tie rule decides).
        self.margin, self.exact_ties, self.sparse_rows = float("inf"), 0, 0
        # GLM-5.2 (models-2026.md section 3.3): "shared" layers have no indexer and reuse the
        # selection of the most recent "full" layer for the same query row.
        n = c["num_hidden_layers"]
        if c.get("indexer_types"):
            self.shared = [t == "shared" for t in c["indexer_types"]]
        elif c.get("index_topk_freq"):
            freq, offset = c["index_topk_freq"], c.get("index_skip_topk_offset", 0)
            self.shared = [max(L - offset + 1, 0) % freq != 0 for L in range(n)]
        else:
            self.shared = [False] * n
        self.last_selection = None

    def t(self, name):
        return self.w[name]

    def attention(self, L, x, pos):
        p = "model.layers.%d.self_attn." % L
        T = x.shape[0]
        qr = rms_norm(x @ self.t(p + "q_a_proj.weight").T, self.t(p + "q_a_layernorm.weight"), self.latent_eps)
        q = (qr @ self.t(p + "q_b_proj.weight").T).reshape(T, self.nh, self.dn + self.dr)
        ckv = x @ self.t(p + "kv_a_proj_with_mqa.weight").T
        c = rms_norm(ckv[:, : self.dc], self.t(p + "kv_a_layernorm.weight"), self.latent_eps)
        k_pe = rope(ckv[:, self.dc :], pos, self.inv, self.a, self.mla_interleaved)
        kv = (c @ self.t(p + "kv_b_proj.weight").T).reshape(T, self.nh, self.dn + self.dv)
        k_nope, v = kv[..., : self.dn], kv[..., self.dn :]
        q_nope, q_pe = q[..., : self.dn], rope(q[..., self.dn :], pos, self.inv, self.a, self.mla_interleaved)
        out = np.zeros((T, self.nh, self.dv))
        if self.shared[L]:
            selection = self.last_selection
        else:
            selection = self.select(L, x, qr, pos)
            self.last_selection = selection
        for r in range(T):
            chosen = selection[r]
            scores = (np.einsum("hd,thd->ht", q_nope[r], k_nope[chosen]) + q_pe[r] @ k_pe[chosen].T) * self.scale
            scores -= scores.max(axis=1, keepdims=True)
            prob = np.exp(scores)
            prob /= prob.sum(axis=1, keepdims=True)
            out[r] = np.einsum("ht,thd->hd", prob, v[chosen])
        return out.reshape(T, -1) @ self.t(p + "o_proj.weight").T

    def select(self, L, x, qr, pos):
        """The lightning indexer of layer L: the positions each row attends to, ascending."""
        p = "model.layers.%d.self_attn." % L
        T = x.shape[0]
        # Lightning indexer: heads [rope (dr) | rest], rope first.
        i = p + "indexer."
        qi = (qr @ self.t(i + "wq_b.weight").T).reshape(T, self.ni, self.di)
        ki = layer_norm(x @ self.t(i + "wk.weight").T, self.t(i + "k_norm.weight"), self.t(i + "k_norm.bias"), 1e-6)
        qi[..., : self.dr] = rope(qi[..., : self.dr], pos, self.inv, self.a, self.idx_interleaved)
        ki[:, : self.dr] = rope(ki[:, : self.dr], pos, self.inv, self.a, self.idx_interleaved)
        wi = (x @ self.t(i + "weights_proj.weight").T) * self.ni ** -0.5  # [T, NI]
        dots = np.einsum("ihd,td->iht", qi, ki) * self.di ** -0.5  # [T, NI, T]
        index = np.einsum("ih,iht->it", wi, np.maximum(dots, 0.0))  # [T, T]
        selection = []
        for r in range(T):
            visible = r + 1
            if visible <= self.topk:
                chosen = np.arange(visible)
            else:
                # Highest score first, ties to the lower position (stable sort on -score).
                order = np.argsort(-index[r, :visible], kind="stable")
                s = index[r, order]
                gap = s[self.topk - 1] - s[self.topk]
                self.sparse_rows += 1
                if gap > 0:
                    self.margin = min(self.margin, gap)
                else:
                    self.exact_ties += 1
                chosen = np.sort(order[: self.topk])
            selection.append(chosen)
        return selection

    def mlp(self, prefix, x):
        g = x @ self.t(prefix + "gate_proj.weight").T
        u = x @ self.t(prefix + "up_proj.weight").T
        return (silu(g) * u) @ self.t(prefix + "down_proj.weight").T

    def moe(self, L, x):
        c = self.cfg
        p = "model.layers.%d.mlp." % L
        E, K = c["n_routed_experts"], c["num_experts_per_tok"]
        groups, kept = c.get("n_group", 1), c.get("topk_group", 1)
        s = 1 / (1 + np.exp(-(x @ self.t(p + "gate.weight").T)))
        biased = s + self.t(p + "gate.e_score_correction_bias")
        out = self.mlp(p + "shared_experts.", x)
        for r in range(x.shape[0]):
            b = biased[r].reshape(groups, E // groups)
            group_score = np.sort(b, axis=1)[:, -2:].sum(axis=1)
            keep = np.argsort(-group_score, kind="stable")[:kept]
            masked = np.full(E, -np.inf)
            for g in keep:
                masked[g * (E // groups) : (g + 1) * (E // groups)] = b[g]
            top = np.argsort(-masked, kind="stable")[:K]
            weights = s[r, top]
            if c.get("norm_topk_prob", True):
                weights = weights / (weights.sum() + 1e-20)
            weights = weights * c.get("routed_scaling_factor", 1.0)
            for e, w in sorted(zip(top, weights)):
                out[r] += w * self.mlp(p + "experts.%d." % e, x[r : r + 1])[0]
        return out

    def forward(self, tokens):
        c = self.cfg
        h = self.t("model.embed_tokens.weight")[np.array(tokens)]
        pos = np.arange(len(tokens), dtype=np.float64)
        for L in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % L
            h = h + self.attention(L, rms_norm(h, self.t(p + "input_layernorm.weight"), self.eps), pos)
            x = rms_norm(h, self.t(p + "post_attention_layernorm.weight"), self.eps)
            h = h + (self.mlp(p + "mlp.", x) if L < c.get("first_k_dense_replace", 0) else self.moe(L, x))
        return rms_norm(h, self.t("model.norm.weight"), self.eps) @ self.t("lm_head.weight").T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    model = Model(args.model)
    prompt = [int(t) for t in args.tokens.split(",")]
    logits = model.forward(prompt)
    prompt_logits, gen_logits, gen = logits, [], []
    seq = list(prompt)
    for j in range(args.n):
        last = logits[-1]
        token = int(np.argmax(last))  # lowest id on ties
        gen.append(token)
        gen_logits.append(last)
        seq.append(token)
        if j + 1 < args.n:
            logits = model.forward(seq)
    np.save(args.out + ".prompt_logits.npy", prompt_logits.astype(np.float32))
    np.save(args.out + ".gen_logits.npy", np.array(gen_logits).astype(np.float32))
    json.dump({"prompt_tokens": prompt, "gen_tokens": gen, "dsa_min_topk_margin": model.margin,
               "dsa_exact_tie_rows": model.exact_ties, "dsa_sparse_rows": model.sparse_rows},
              open(args.out + ".json", "w"))
    print("generated:", " ".join(map(str, gen)), " min top-k margin %.3g, exact ties in %d of %d sparse selections"
          % (model.margin, model.exact_ties, model.sparse_rows))


if __name__ == "__main__":
    main()
