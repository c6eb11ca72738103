# SPDX-License-Identifier: Apache-2.0
"""Greedy generation of Hugging Face models with gqla holding the KV cache
and computing attention, checked token by token against transformers' own
eager generation.

Two small models are built from configs with random weights (no hub
access): a LlamaForCausalLM (GQA) and a DeepseekV3ForCausalLM (MLA, which
gqla runs as GQLA with one group per head). Each is generated twice with
``model.generate`` (greedy, 32 new tokens, a batch of prompts): once with
transformers' eager attention and its DynamicCache, once with gqla.

How gqla plugs into transformers (nothing of transformers is patched):
- ``GqlaCache``, a DynamicCache subclass, owns one gqla session with a
  sequence per batch row. ``update`` appends the layer's new keys and
  values to gqla: LLaMA's rotated k and v; DeepSeek's normalized latent c
  and rotated rope key, which transformers 5 hands to the cache as they
  are (older versions hand it the per-head keys: c then comes from
  ``kv_a_layernorm``'s output through a forward hook, kr from the keys'
  rope part). The DynamicCache keeps one number per token (a [B, 1, S, 1]
  slice), so transformers' length and mask bookkeeping works unchanged,
  and ``update`` returns only the newest token (what the module does with
  it is ignored): gqla holds every cached value and nothing expands or
  copies the cache outside it.
- An attention function registered as "gqla" (``AttentionInterface``)
  calls ``Session.attend`` with the layer's queries: the last s_q tokens of
  every sequence, causal, which is what generation asks (the prompt as one
  chunk, then one token per step). For DeepSeek the per-call path is a
  command-line choice: absorb, gqa_transient (the latent up-projected for
  the call) or auto (the cost model picks per call).

Float32 throughout (the models, gqla's io and cache), so the two runs
differ only by float32 rounding; the script also reports the largest
difference of the per-step logits. Runs on the GPU when torch sees one and
gqla has its CUDA module, else on the CPU.

    PYTHONPATH=build/bindings/python python3 examples/python/hf_generate.py [--device cpu|cuda]
"""

import argparse
import sys
import time

import gqla


def nothing_to_run(why):
    print(f"{why}: nothing to run")
    sys.exit(0)


try:
    import torch
    import transformers
    from transformers import AttentionInterface, DynamicCache
except ImportError as e:
    nothing_to_run(f"{e.name or 'transformers'} is not installed")


class GqlaCache(DynamicCache):
    """A DynamicCache whose keys and values live in a gqla session.

    ``model`` is the model the cache serves (its attention modules learn
    where to find the cache, and for MLA the latent hook is installed);
    ``batch`` the number of sequences; ``path`` the per-call path of
    ``Session.attend``."""

    def __init__(self, model, batch, max_tokens, device, path="auto"):
        super().__init__()
        self.path = path
        self.mla = hasattr(model.config, "kv_lora_rank")
        attention = [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "o_proj")]
        attention.sort(key=lambda m: m.layer_idx)
        first, c = attention[0], model.config
        # Whole pages per sequence: a page more than the tokens need.
        common = dict(num_layers=len(attention), max_tokens=batch * (max_tokens + 256), max_batch=batch,
                      max_q_len=max_tokens, device=device, io_dtype="f32", cache_dtype="f32",
                      softmax_scale=float(first.scaling))
        if self.mla:
            self.nope_dim, self.latent_dim = c.qk_nope_head_dim, c.kv_lora_rank
            config = gqla.Config.gqla(num_heads=c.num_attention_heads, num_groups=c.num_attention_heads,
                                      latent_dim=c.kv_lora_rank, nope_dim=c.qk_nope_head_dim,
                                      rope_dim=c.qk_rope_head_dim, value_dim=c.v_head_dim, **common)
        else:
            head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
            config = gqla.Config.gqa(num_heads=c.num_attention_heads, num_kv_heads=c.num_key_value_heads,
                                     head_dim=head_dim, **common)
        self.session = gqla.Session(config)
        self.seqs = [self.session.add_sequence() for _ in range(batch)]
        self.latent = {}    # layer -> the newest normalized latent c [B, S, r]
        self.hooks = []
        self.paths_taken = set()
        for module in attention:
            module.gqla_cache = self
            if self.mla:
                self.session.set_weights(module.layer_idx, module.kv_b_proj.weight.detach().float().contiguous())
                self.hooks.append(module.kv_a_layernorm.register_forward_hook(self._latent_hook(module.layer_idx)))

    def _latent_hook(self, layer):
        def keep(_module, _inputs, output):
            self.latent[layer] = output
        return keep

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        # [B, heads, S, dim] as the attention module built them.
        batch, _, new, _ = key_states.shape
        rows = lambda t: t.reshape(batch * new, *t.shape[2:]).float().contiguous()
        hooked = self.latent.pop(layer_idx, None)                     # [B, S, r]
        if self.mla and key_states.shape[1] == 1 and key_states.shape[-1] == self.latent_dim:
            c, kr = key_states[:, 0], value_states[:, 0]              # latent form (transformers 5)
        elif self.mla:
            c, kr = hooked, key_states[:, 0, :, self.nope_dim:]       # per-head keys: rope part shared
        else:
            c, kr = key_states.transpose(1, 2), value_states.transpose(1, 2)  # k, v [B, S, G, D]
        self.session.append_many(layer_idx, self.seqs, rows(c), rows(kr), counts=[new] * batch)
        # One number per token keeps transformers' lengths right (an empty
        # tensor would read as length 0).
        super().update(key_states[:, :1, :, :1], value_states[:, :1, :, :1], layer_idx, cache_kwargs)
        return key_states[:, :, -1:], value_states[:, :, -1:]

    def attend(self, layer, query):
        # query [B, H, S, Dq] -> o [B, S, H, Dv]
        q = query.transpose(1, 2).float().contiguous()
        path = self.path if self.mla else "auto"
        o, taken = self.session.attend(layer, self.seqs, q, path=path, return_path=True)
        self.paths_taken.add(taken)
        return o.to(query.dtype)

    def close(self):
        for hook in self.hooks:
            hook.remove()
        self.session.close()


def gqla_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function signature; the cache is the layer's
    gqla session (causal over each sequence's cached tokens, no padding)."""
    if dropout:
        raise ValueError("gqla attention: dropout is not supported")
    return module.gqla_cache.attend(module.layer_idx, query), None


AttentionInterface.register("gqla", gqla_attention)


def set_attention(model, name):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:  # transformers < 4.56
        model.config._attn_implementation = name


def llama_model():
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=512, intermediate_size=1024,
                                      num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                                      head_dim=64, max_position_embeddings=1024, rms_norm_eps=1e-5,
                                      tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(config)


def deepseek_model():
    # DeepSeek-V3's attention dims (r 512, d_r 64, d_c 128, d_v 128) at 8 heads,
    # dense MLPs only (first_k_dense_replace = all layers).
    config = transformers.DeepseekV3Config(vocab_size=512, hidden_size=512, intermediate_size=1024,
                                           moe_intermediate_size=256, num_hidden_layers=2,
                                           num_attention_heads=8, num_key_value_heads=8, q_lora_rank=None,
                                           kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                                           v_head_dim=128, first_k_dense_replace=2, n_routed_experts=8,
                                           num_experts_per_tok=2, n_group=1, topk_group=1,
                                           max_position_embeddings=1024, tie_word_embeddings=False)
    return transformers.DeepseekV3ForCausalLM(config)


def generate(model, prompts, steps, cache=None):
    out = model.generate(prompts, max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                         past_key_values=cache, use_cache=True, output_scores=True,
                         return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    return out.sequences[:, prompts.shape[1]:], torch.stack(out.scores, 1)


def check(name, build, paths, device, batch, prompt_len, steps, seed):
    torch.manual_seed(seed)
    model = build().to(device=device, dtype=torch.float32).eval()
    # Random models put their logits close together; a larger init spreads
    # them so that float32 rounding cannot flip a greedy choice by chance.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.08)
    prompts = torch.randint(1, model.config.vocab_size, (batch, prompt_len), device=device)
    set_attention(model, "eager")
    with torch.no_grad():
        t0 = time.perf_counter()
        want, want_scores = generate(model, prompts, steps)
        eager_s = time.perf_counter() - t0
    top2 = want_scores.topk(2, dim=-1).values
    margin = (top2[..., 0] - top2[..., 1]).min().item()
    ok = True
    set_attention(model, "gqla")
    for path in paths:
        cache = GqlaCache(model, batch, prompt_len + steps, "cuda" if device.type == "cuda" else "cpu", path)
        try:
            with torch.no_grad():
                t0 = time.perf_counter()
                got, got_scores = generate(model, prompts, steps, cache)
                gqla_s = time.perf_counter() - t0
            lengths = {cache.session.length(s, layer) for s in cache.seqs for layer in range(cache.session.config.num_layers)}
            taken = ",".join(sorted(cache.paths_taken))
        finally:
            cache.close()
        same = torch.equal(got, want)
        agree = (got == want).all(0).long().cumprod(0).sum().item()  # steps equal in every row
        logit_gap = (got_scores - want_scores).abs().max().item()
        print(f"{name:9s} path {path:13s} ran on {taken:21s} tokens {'identical' if same else 'DIFFER'} "
              f"({agree}/{steps} steps x {batch} rows), max |logit diff| {logit_gap:.2e} "
              f"(smallest top-2 margin {margin:.2e}); cached lengths {sorted(lengths)}; "
              f"eager {eager_s:.2f} s, gqla {gqla_s:.2f} s")
        ok &= same and lengths == {prompt_len + steps - 1}
    set_attention(model, "eager")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    want_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()
                                          and gqla.device_count("cuda") > 0)
    if want_cuda and not (torch.cuda.is_available() and gqla.device_count("cuda") > 0):
        sys.exit("--device cuda: torch or gqla sees no CUDA device")
    device = torch.device("cuda" if want_cuda else "cpu")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name()})" if want_cuda else ""))
    ok = check("llama", llama_model, ["auto"], device, args.batch, args.prompt, args.steps, args.seed)
    ok &= check("deepseek", deepseek_model, ["absorb", "gqa_transient", "auto"], device, args.batch, args.prompt,
                args.steps, args.seed + 1)
    if not ok:
        sys.exit("gqla's generation differs from transformers' eager generation")
    print("gqla generates the same tokens as transformers' eager attention")


if __name__ == "__main__":
    main()
