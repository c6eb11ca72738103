// SPDX-License-Identifier: Apache-2.0
// SessionFuzz (session_fuzz.hpp): gqla_attention, what gqla_decode does not
// reach: ragged q_lens (one query count per sequence, rows packed), the path
// of one call (AUTO, GQA, ABSORB, GQA_TRANSIENT and values outside the enum)
// with path_taken, and sparse (top-k) attention through `indices`: random
// lists with -1 padding, positions in the causal tail or outside the
// sequence, repeats, and rows that list nothing visible, in [N, topk] or
// [B, s_q, topk] views (docs/sparse-attention.md). Accepted calls are checked
// by check_outputs on the form path_taken names (every form the call could
// take when it is not asked for); refused ones must write nothing.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>

#include "tests/fuzz/session_fuzz.hpp"

namespace fuzz {

namespace {

using Form = ShadowSession::Form;

Form form_of(gqla_path taken) {
    return taken == GQLA_PATH_ABSORB ? Form::Direct : taken == GQLA_PATH_GQA ? Form::Expanded : Form::Transient;
}

}  // namespace

std::vector<int32_t> SessionFuzz::index_lists(int64_t length, int32_t n, int32_t topk, int32_t empty_row) {
    const int64_t L = length, P = cfg_.page_size;
    std::vector<int32_t> out(static_cast<size_t>(n) * static_cast<size_t>(topk));
    for (int32_t k = 0; k < n; ++k) {
        const int64_t limit = L - n + k;  // the last position query k sees
        int32_t* row = &out[static_cast<size_t>(k) * static_cast<size_t>(topk)];
        for (int32_t t = 0; t < topk; ++t) {
            int64_t v = -1;
            const int64_t kind = r_.range(0, 9);
            const bool tail = limit + 1 < L;  // positions it may not see exist
            if (k == empty_row) {
                // Only entries that must be skipped, never read.
                v = tail && r_.chance(0.5) ? r_.range(limit + 1, L - 1) : r_.chance(0.5) ? -1 : L + r_.range(0, 9);
            } else if (kind <= 3 && limit >= 0) {
                v = r_.range(0, limit);
            } else if (kind == 4 && limit >= 0) {  // a page's last or first slot
                v = std::min(limit, r_.range(0, limit / P) * P + (r_.chance(0.5) ? P - 1 : 0));
            } else if (kind == 5 && t > 0) {
                v = row[r_.range(0, t - 1)];  // listed twice: counts twice
            } else if (kind == 7 && tail) {
                v = r_.range(limit + 1, L - 1);  // the causal tail
            } else if (kind == 8) {
                const int64_t far[4] = {L + r_.range(0, 50), -2 - r_.range(0, 50), INT32_MAX, INT32_MIN};
                v = far[r_.range(0, 3)];
            } else if (kind == 9 && limit >= 0) {
                v = limit;  // the query's own position
            }
            row[t] = static_cast<int32_t>(v);
        }
    }
    return out;
}

bool SessionFuzz::op_attention() {
    run.op = "attention";
    Expect e;
    CallTarget target = pick_call(e);  // as for decode
    const int32_t layer = target.layer;
    const bool layer_valid = target.layer_valid;
    std::vector<gqla_seq_id>& ids = target.ids;
    const int32_t B = static_cast<int32_t>(ids.size());
    // The cached tokens of each sequence in the layer (0 when unknown).
    std::vector<int64_t> lengths;
    for (gqla_seq_id id : ids) lengths.push_back(shadow_.has(id) && layer_valid ? shadow_.length(id, layer) : 0);

    // Query counts: uniform (q_lens NULL, s_q from q's shape) or ragged.
    const bool ragged = r_.chance(0.6);
    std::vector<int32_t> q_lens(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t fits = std::max<int64_t>(1, std::min<int64_t>(cfg_.max_q_len, lengths[i]));
        q_lens[i] = static_cast<int32_t>(r_.range(1, fits));
        if (ragged && r_.chance(0.03)) q_lens[i] = static_cast<int32_t>(r_.pick<int64_t>({0, -1, cfg_.max_q_len + 1}));
    }
    if (!ragged) {
        int64_t shortest = INT64_MAX;
        for (int64_t len : lengths) shortest = std::min(shortest, len);
        int64_t s_q = r_.range(1, std::max<int64_t>(1, std::min<int64_t>(cfg_.max_q_len, shortest)));
        if (r_.chance(0.03)) s_q = r_.pick<int64_t>({0, cfg_.max_q_len + 1});
        std::fill(q_lens.begin(), q_lens.end(), static_cast<int32_t>(s_q));
    }
    int64_t N = 0;
    bool counts_ok = true;
    for (size_t i = 0; i < ids.size(); ++i) {
        const int32_t n = q_lens[i];
        if (n < 1 || n > cfg_.max_q_len) counts_ok = false;
        // Queries are cached tokens: more than the sequence holds is refused.
        if (n > lengths[i] && shadow_.has(ids[i])) e.error(GQLA_ERR_INVALID_ARGUMENT);
        N += std::max(n, 0);
    }
    if (!counts_ok || N > cfg_.max_q_tokens) e.error(GQLA_ERR_INVALID_ARGUMENT);
    const int32_t s_q = q_lens[0];

    // The path of this call. An int until the call: a gqla_path holding a
    // value outside the enum would be undefined behaviour in C++.
    const int raw = r_.chance(0.03) ? (r_.chance(0.5) ? -1 : 4) : static_cast<int>(r_.range(0, 3));
    const bool form_path = raw == GQLA_PATH_ABSORB || raw == GQLA_PATH_GQA_TRANSIENT;
    if (raw < GQLA_PATH_AUTO || raw > GQLA_PATH_GQA_TRANSIENT || (!shadow_.is_gqla() && form_path))
        e.error(GQLA_ERR_INVALID_ARGUMENT);
    if (!shadow_.keeps_latent() && form_path) e.error(GQLA_ERR_INVALID_STATE);  // forms that need the latent

    // q, o, lse: [B, s_q, H, *] uniform, [N, H, *] ragged.
    const int64_t H = cfg_.num_heads;
    const std::vector<int64_t> lead = ragged ? std::vector<int64_t>{N} : std::vector<int64_t>{B, std::max(s_q, 0)};
    auto shape = [&](std::vector<int64_t> tail) {
        std::vector<int64_t> sh = lead;
        sh.insert(sh.end(), tail.begin(), tail.end());
        return sh;
    };
    Tensor q = make_tensor(cfg_.io_dtype, shape({H, shadow_.q_dim()}), 1.0, true);
    Tensor o = make_tensor(cfg_.io_dtype, shape({H, shadow_.out_dim()}), 0, false);
    const bool with_lse = r_.chance(0.7);
    Tensor lse = make_tensor(GQLA_DTYPE_F32, shape({H}), 0, false);
    const std::vector<unsigned char> o_before = o.buf.bytes, lse_before = lse.buf.bytes;
    const gqla_tensor* pq = &q.t;
    const gqla_tensor* po = &o.t;
    const gqla_tensor* pl = with_lse ? &lse.t : nullptr;
    const Flaw flaw = maybe_flaw(0.06);
    const int which = static_cast<int>(r_.range(0, with_lse ? 2 : 1));
    const bool flawed = which == 0   ? apply_flaw(flaw, q.t, &pq, cfg_.io_dtype, false)
                        : which == 1 ? apply_flaw(flaw, o.t, &po, cfg_.io_dtype, false)
                                     : (flaw != Flaw::Null && apply_flaw(flaw, lse.t, &pl, GQLA_DTYPE_F32, false));
    if (flawed) e.error(GQLA_ERR_INVALID_ARGUMENT);

    // Sparse: one list of topk positions per query row.
    const bool sparse = r_.chance(0.45);
    Tensor indices;
    const gqla_tensor* pi = nullptr;
    std::vector<int32_t> idx;
    int32_t topk = 0;
    if (sparse) {
        int64_t longest = 1;
        for (int64_t len : lengths) longest = std::max(longest, len);
        topk = static_cast<int32_t>(r_.chance(0.8) ? r_.range(1, 8) : r_.range(1, 2 * longest + 4));
        const int32_t empty_row = r_.chance(0.15) ? static_cast<int32_t>(r_.range(0, 3)) : -1;
        for (size_t i = 0; i < ids.size(); ++i) {
            const std::vector<int32_t> rows = index_lists(lengths[i], std::max(q_lens[i], 0), topk, empty_row);
            idx.insert(idx.end(), rows.begin(), rows.end());
        }
        const bool three_d = !ragged && r_.chance(0.4);
        const std::vector<int64_t> ishape =
            three_d ? std::vector<int64_t>{B, std::max(s_q, 0), topk} : std::vector<int64_t>{N, topk};
        indices = make_tensor(GQLA_DTYPE_I32, ishape, 0, false);
        // The gaps of the buffer hold position 0, visible to every query:
        // an entry read from outside the view would change the output.
        for (size_t i = 0; i < indices.in_view.size(); ++i)
            if (!indices.in_view[i]) indices.buf.set(i, 0);
        write_view(indices, std::vector<double>(idx.begin(), idx.end()));
        pi = &indices.t;
        // A [B, s_q, topk] view's rows must collapse into row b * s_q + i.
        const int64_t* st = indices.t.strides;
        if (three_d && B > 1 && s_q > 1 && st[0] != s_q * st[1]) e.error(GQLA_ERR_INVALID_ARGUMENT);
        if (r_.chance(0.06)) {
            e.error(GQLA_ERR_INVALID_ARGUMENT);
            switch (r_.range(0, 3)) {
                case 0:  // another row count
                    indices.t.shape[0] += 1;
                    break;
                case 1:  // topk 0
                    indices.t.shape[indices.t.ndim - 1] = 0;
                    break;
                case 2:
                    indices.t.dtype = GQLA_DTYPE_F32;
                    break;
                default: {
                    // The flaws of any tensor that leave it one: an index
                    // tensor accepts any topk, and NULL means dense.
                    const Flaw f = static_cast<Flaw>(
                        r_.pick<int64_t>({int64_t(Flaw::InnerStride), int64_t(Flaw::StructSize), int64_t(Flaw::Device),
                                          int64_t(Flaw::Negative), int64_t(Flaw::Overlap), int64_t(Flaw::DataNull)}));
                    if (!apply_flaw(f, indices.t, &pi, GQLA_DTYPE_I32, false)) indices.t.dtype = GQLA_DTYPE_BF16;
                    break;
                }
            }
        }
    }

    gqla_attention_args args;
    Expect ok;
    check_status("gqla_attention_args_default", gqla_attention_args_default(&args), ok);
    args.layer = layer;
    args.batch = B;
    args.seqs = ids.data();
    args.q_lens = ragged ? q_lens.data() : nullptr;
    args.q = pq;
    args.o = const_cast<gqla_tensor*>(po);
    args.lse = const_cast<gqla_tensor*>(pl);
    std::memcpy(&args.path, &raw, sizeof(raw));
    gqla_path taken = GQLA_PATH_AUTO;  // never a form: a refused call must leave it
    const bool ask_taken = r_.chance(0.8);
    args.path_taken = ask_taken ? &taken : nullptr;
    args.indices = pi;
    if (r_.chance(0.01)) {
        args.seqs = nullptr;
        e.error(GQLA_ERR_INVALID_ARGUMENT);
    }
    if (r_.chance(0.01)) {
        args.batch = r_.chance(0.5) ? 0 : cfg_.max_batch + 1;
        e.error(GQLA_ERR_INVALID_ARGUMENT);
    }
    const gqla_path before = stats().path;
    if (run.verbose)
        std::printf("attention layer %d batch %d %s path %d %s topk %d\n", layer, B, ragged ? "ragged" : "uniform", raw,
                    sparse ? "sparse" : "dense", topk);
    if (!check_status("gqla_attention", gqla_attention(s_, &args), e)) {
        check_unwritten("attention", o, o_before, &lse, lse_before);
        if (taken != GQLA_PATH_AUTO) fail("a refused gqla_attention wrote path_taken %d", int(taken));
        return false;
    }
    // The forms this call may run on (docs: gqla_attention_args.path).
    const gqla_path after = stats().path;
    std::vector<Form> forms;
    if (!shadow_.is_gqla())
        forms = {Form::Direct};
    else if (!shadow_.keeps_latent())
        forms = {Form::Expanded};  // the kept expanded cache is its only cache
    else if (raw == GQLA_PATH_ABSORB)
        forms = {Form::Direct};
    else if (raw == GQLA_PATH_GQA_TRANSIENT)
        forms = {Form::Transient};
    else if (raw == GQLA_PATH_GQA)  // over the kept expanded cache when it is kept
        forms = {before == GQLA_PATH_GQA ? Form::Expanded : Form::Transient};
    else  // AUTO: any form available after the session's own AUTO switch
        forms = after == GQLA_PATH_GQA ? std::vector<Form>{Form::Direct, Form::Expanded, Form::Transient}
                                       : std::vector<Form>{Form::Direct, Form::Transient};
    if (ask_taken) {
        if (!shadow_.is_gqla() && taken != GQLA_PATH_GQA) fail("path_taken %d on a GQA-kind session", int(taken));
        if (shadow_.is_gqla()) {
            if (taken != GQLA_PATH_GQA && taken != GQLA_PATH_ABSORB && taken != GQLA_PATH_GQA_TRANSIENT)
                fail("path_taken %d is not a form", int(taken));
            if (std::find(forms.begin(), forms.end(), form_of(taken)) == forms.end())
                fail("path_taken %d for path %d (session path %d before the call, %d after)", int(taken), raw,
                     int(before), int(after));
            forms = {form_of(taken)};
        }
    }
    CallCheck c;
    c.call = "attention";
    c.layer = layer;
    c.ids = ids;
    c.q_lens = q_lens;
    c.q = &q;
    c.o = &o;
    c.o_before = &o_before;
    c.lse = with_lse ? &lse : nullptr;
    c.lse_before = &lse_before;
    c.idx = idx;
    c.topk = topk;
    c.forms = forms;
    check_outputs(c);
    ++run.attention_checked;
    return true;
}

}  // namespace fuzz
