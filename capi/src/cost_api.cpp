// SPDX-License-Identifier: Apache-2.0
// Cost prediction: pure (from a config and a probe) or for a live session.
#include <cmath>
#include <cstddef>
#include <cstring>

#include "capi/src/api_guard.hpp"
#include "capi/src/session_handle.hpp"
#include "core/backend_registry.hpp"
#include "core/config.hpp"
#include "core/cost_model.hpp"
#include "core/workload.hpp"

using gqla::capi::guarded;

namespace {

void check_positive(double v, const char* field) {
    if (!(v > 0.0) || !std::isfinite(v))
        gqla::fail(GQLA_ERR_INVALID_ARGUMENT, "probe->%s: expected a finite value > 0, got %g", field, v);
}

gqla_probe_info read_probe(const gqla_probe_info* p) {
    if (p->struct_size < sizeof(gqla_probe_info))
        gqla::fail(GQLA_ERR_INVALID_ARGUMENT, "probe->struct_size: expected >= %zu (sizeof(gqla_probe_info)), got %zu",
                   sizeof(gqla_probe_info), p->struct_size);
    gqla_probe_info copy;
    std::memcpy(&copy, p, sizeof(copy));
    copy.struct_size = sizeof(copy);
    check_positive(copy.read_gbps, "read_gbps");
    check_positive(copy.peak_gflops_f32, "peak_gflops_f32");
    return copy;
}

// A 1.0 caller's report ends at expand_s; the fields appended in 1.1 are
// written only when the caller's struct_size holds them.
constexpr size_t kCostReportV1Size = offsetof(gqla_cost_report, expand_s) + sizeof(double);

}  // namespace

extern "C" {

gqla_status gqla_predict_cost(const gqla_config* cfg, const gqla_probe_info* probe, const gqla_workload* w,
                              gqla_cost_report* out) {
    return guarded("gqla_predict_cost", [&] {
        gqla_config c = gqla::read_config(cfg, "cfg");
        gqla::validate_config(c);
        gqla::resolve_dims(c);
        c = gqla::served_layer(c);  // a shard is priced as the layer it serves
        gqla_workload work = gqla::read_workload(w, "w");
        gqla::capi::require_out_struct(out, "out", kCostReportV1Size, "gqla_cost_report");
        gqla_probe_info p;
        if (probe != nullptr) {
            p = read_probe(probe);
        } else {
            gqla_device_type device = gqla::resolve_device(c.device);
            p = gqla::probe_through_backend(device, device == GQLA_DEVICE_CUDA ? c.device_index : 0, 0);
        }
        gqla_cost_report report = gqla::predict_cost(c, p, work, gqla::Efficiency{});
        if (c.kind == GQLA_KIND_GQLA && c.keep_latent == 0)  // without the latent the GQA path is the only form
            report.chosen = report.call_chosen = GQLA_PATH_GQA;
        gqla::capi::write_out_struct(out, report);
    });
}

gqla_status gqla_session_predict_cost(const gqla_session* session, const gqla_workload* w, gqla_cost_report* out) {
    return guarded("gqla_session_predict_cost", [&] {
        const gqla::Session& s = gqla::capi::session_of(session);
        gqla_workload work = gqla::read_workload(w, "w");
        gqla::capi::require_out_struct(out, "out", kCostReportV1Size, "gqla_cost_report");
        gqla::capi::write_out_struct(out, s.predict_cost(work));
    });
}

}  // extern "C"
