// SPDX-License-Identifier: Apache-2.0
// A minimal stand-in for the core over the CUDA backend's vtable: page
// allocation with ref-counted pages and copy-on-write, per-layer lengths,
// update_sequence after every change, and host copies of every appended row
// so the float64 reference can be run on the same inputs. Lets the backend be
// tested (and timed) without the rest of the library.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/backend_api.h"

extern "C" const gqla_backend_vtable* gqla_cuda_backend_get(uint32_t abi_version);

namespace gqla::test {

inline void expect_ok(const gqla_backend_vtable* vt, void* ctx, gqla_status st, const char* what) {
    if (st != GQLA_OK)
        throw std::runtime_error(std::string(what) + " failed: status " + std::to_string(st) + ": " +
                                 (ctx ? vt->error_message(ctx) : ""));
}

inline gqla_view host_view(const void* data, gqla_dtype dt, std::vector<int64_t> shape) {
    gqla_view v{};
    v.data = const_cast<void*>(data);
    v.dtype = dt;
    v.on_device = 0;
    v.ndim = static_cast<int32_t>(shape.size());
    int64_t stride = 1;
    for (int i = v.ndim - 1; i >= 0; --i) {
        v.shape[i] = shape[static_cast<size_t>(i)];
        v.strides[i] = stride;
        stride *= shape[static_cast<size_t>(i)];
    }
    return v;
}

struct Harness {
    const gqla_backend_vtable* vt = nullptr;
    void* ctx = nullptr;
    gqla_backend_desc desc{};
    std::vector<int32_t> free_pages;
    std::vector<int32_t> refs;
    struct Seq {
        int32_t slot;
        std::vector<int32_t> pages;
        std::vector<int64_t> len;                        // per layer
        std::vector<std::vector<float>> a_rows, b_rows;  // per layer, appended inputs (f32)
    };
    std::map<int, Seq> seqs;
    std::vector<int32_t> free_slots;
    int next_id = 0;
    std::vector<std::vector<float>> weights;  // GQLA, per layer

    explicit Harness(const gqla_backend_desc& d) : desc(d) {
        vt = gqla_cuda_backend_get(GQLA_BACKEND_ABI_VERSION);
        if (!vt) throw std::runtime_error("gqla_cuda_backend_get refused the ABI version");
        char err[512] = {0};
        gqla_status st = vt->create(&desc, &ctx, err, sizeof err);
        if (st != GQLA_OK) throw std::runtime_error(std::string("create: ") + err);
        for (int32_t p = static_cast<int32_t>(d.num_pages) - 1; p >= 0; --p) free_pages.push_back(p);
        refs.assign(static_cast<size_t>(d.num_pages), 0);
        for (int32_t s = d.max_sequences - 1; s >= 0; --s) free_slots.push_back(s);
        weights.resize(static_cast<size_t>(d.num_layers));
    }
    ~Harness() {
        if (ctx) vt->destroy(ctx);
    }

    int a_width() const { return desc.kind == GQLA_KIND_GQA ? desc.num_kv_heads * desc.head_dim : desc.latent_dim; }
    int b_width() const { return desc.kind == GQLA_KIND_GQA ? desc.num_kv_heads * desc.value_dim : desc.rope_dim; }

    void sync_tables(Seq& s) {
        expect_ok(vt, ctx,
                  vt->update_sequence(ctx, s.slot, s.pages.data(), static_cast<int32_t>(s.pages.size()), s.len.data()),
                  "update_sequence");
    }

    int add() {
        Seq s;
        s.slot = free_slots.back();
        free_slots.pop_back();
        s.len.assign(static_cast<size_t>(desc.num_layers), 0);
        s.a_rows.resize(static_cast<size_t>(desc.num_layers));
        s.b_rows.resize(static_cast<size_t>(desc.num_layers));
        int id = next_id++;
        seqs[id] = s;
        sync_tables(seqs[id]);
        return id;
    }

    int fork(int parent) {
        int id = add();
        Seq& c = seqs[id];
        const Seq& p = seqs[parent];
        c.pages = p.pages;
        for (int32_t pg : c.pages) ++refs[static_cast<size_t>(pg)];
        c.len = p.len;
        c.a_rows = p.a_rows;
        c.b_rows = p.b_rows;
        sync_tables(c);
        return id;
    }

    void release(int id) {
        Seq& s = seqs[id];
        for (int32_t pg : s.pages)
            if (--refs[static_cast<size_t>(pg)] == 0) free_pages.push_back(pg);
        s.pages.clear();
        std::fill(s.len.begin(), s.len.end(), 0);
        sync_tables(s);
        free_slots.push_back(s.slot);
        seqs.erase(id);
    }

    void set_weights(int layer, const std::vector<float>& w) {
        weights[static_cast<size_t>(layer)] = w;
        gqla_view v = host_view(w.data(), GQLA_DTYPE_F32,
                                {int64_t(desc.num_kv_heads) * (desc.nope_dim + desc.value_dim), desc.latent_dim});
        expect_ok(vt, ctx, vt->set_weights(ctx, layer, &v), "set_weights");
    }

    // Makes positions [start, start + n) of `s` writable: new pages, and
    // copy-on-write of a shared partially filled last page.
    void reserve(Seq& s, int64_t start, int64_t n) {
        const int P = desc.page_size;
        if (start % P != 0 && !s.pages.empty()) {
            size_t last = static_cast<size_t>(start / P);
            int32_t old = s.pages[last];
            if (refs[static_cast<size_t>(old)] > 1) {
                int32_t fresh = free_pages.back();
                free_pages.pop_back();
                refs[static_cast<size_t>(fresh)] = 1;
                --refs[static_cast<size_t>(old)];
                expect_ok(vt, ctx, vt->copy_pages(ctx, 1, &old, &fresh), "copy_pages");
                s.pages[last] = fresh;
            }
        }
        while (static_cast<int64_t>(s.pages.size()) * P < start + n) {
            if (free_pages.empty()) throw std::runtime_error("harness: page pool exhausted");
            int32_t pg = free_pages.back();
            free_pages.pop_back();
            refs[static_cast<size_t>(pg)] = 1;
            s.pages.push_back(pg);
        }
    }

    // Append n rows (f32 host, or device rows when dev_a/dev_b given, in io dtype)
    // to one sequence of one layer.
    void append(int layer, int id, int64_t n, const float* a, const float* b, bool write_expanded,
                const void* dev_a = nullptr, const void* dev_b = nullptr) {
        Seq& s = seqs[id];
        const int64_t start = s.len[static_cast<size_t>(layer)];
        reserve(s, start, n);
        gqla_append_item item{s.pages.data(), s.slot, start, n, 0};
        gqla_append_args args{};
        args.layer = layer;
        args.num_items = 1;
        args.items = &item;
        args.write_expanded = write_expanded;
        if (desc.kind == GQLA_KIND_GQA) {
            args.a = host_view(a, GQLA_DTYPE_F32, {n, desc.num_kv_heads, desc.head_dim});
            args.b = host_view(b, GQLA_DTYPE_F32, {n, desc.num_kv_heads, desc.value_dim});
        } else {
            args.a = host_view(a, GQLA_DTYPE_F32, {n, desc.latent_dim});
            args.b = host_view(b, GQLA_DTYPE_F32, {n, desc.rope_dim});
        }
        if (dev_a) {
            args.a.data = const_cast<void*>(dev_a);
            args.a.on_device = 1;
            args.a.dtype = desc.io_dtype;
            args.b.data = const_cast<void*>(dev_b);
            args.b.on_device = 1;
            args.b.dtype = desc.io_dtype;
        } else {
            auto& ar = s.a_rows[static_cast<size_t>(layer)];
            auto& br = s.b_rows[static_cast<size_t>(layer)];
            ar.insert(ar.end(), a, a + n * a_width());
            br.insert(br.end(), b, b + n * b_width());
        }
        expect_ok(vt, ctx, vt->append(ctx, &args), "append");
        s.len[static_cast<size_t>(layer)] = start + n;
        sync_tables(s);
    }

    // Sequences of a uniform call with s_q queries each (q_row = b * s_q).
    std::vector<gqla_decode_seq> decode_seqs(const std::vector<int>& ids, int layer, int s_q = 1) {
        return ragged_seqs(ids, layer, std::vector<int>(ids.size(), s_q));
    }
    // Sequences of a call where ids[b] has q_lens[b] queries, rows packed in
    // sequence order (q_row: the prefix sum of the q_lens before it).
    std::vector<gqla_decode_seq> ragged_seqs(const std::vector<int>& ids, int layer, const std::vector<int>& q_lens) {
        std::vector<gqla_decode_seq> out;
        int64_t row = 0;
        for (size_t b = 0; b < ids.size(); ++b) {
            Seq& s = seqs[ids[b]];
            gqla_decode_seq d{};
            d.page_table = s.pages.data();
            d.num_pages = static_cast<int32_t>(s.pages.size());
            d.slot = s.slot;
            d.length = s.len[static_cast<size_t>(layer)];
            d.q_len = q_lens[b];
            d.q_row = row;
            row += q_lens[b];
            out.push_back(d);
        }
        return out;
    }
};

}  // namespace gqla::test
