// Profile requests (docs/profiling.md): the distinct profile keys of a plan's sub-ops that the
// database lacks, each with what an external timer needs to run the op: the registry type, the local
// shapes and dtypes of the forward instance, its attributes, and whether the forward or the backward is
// timed. A backward key (op "<type>/backward") is timed through autograd of its forward part, so its
// request describes the forward part's inputs and names the inputs that receive gradients.
//
// The request file (JSON, version 1) and the timer's results file are the only contract between the
// engine and the timer (python/loom_profile); the timer holds no planning logic.
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/cluster/gpu.h"
#include "loom/core/error.h"
#include "loom/cost/compute_model.h"
#include "loom/cost/profile_db.h"
#include "loom/ir/attribute.h"
#include "loom/plan/plan.h"

namespace loom::cost {

// One tensor a timer builds: local shape and dtype.
struct TensorSpec {
  ir::Shape shape;
  ir::DType dtype = ir::DType::bf16;
  bool operator==(const TensorSpec&) const = default;
};

// What a timer runs for one missing key.
struct ProfileRequest {
  ProfileKey key;                          // the database key the measurement fills
  std::string op_type;                     // registry type of the forward op ("linear")
  bool backward = false;                   // time the backward of the forward instance below
  std::vector<TensorSpec> inputs;          // the forward instance's inputs
  std::vector<TensorSpec> outputs;         // its outputs
  ir::Attrs attrs;                         // the forward op's attributes
  std::vector<std::int64_t> grad_inputs;   // backward: forward inputs that receive a gradient
  std::vector<std::int64_t> grad_outputs;  // backward: forward outputs whose gradient flows in
  std::string example;                     // name of the first sub-op (in id order) with this key
  std::size_t sub_ops = 0;                 // sub-ops of the plan that share the key
  // Distinct instances (inputs, outputs, attributes) behind the key. The key holds neither attributes nor
  // a backward op's forward shapes, so e.g. causal and plain attention of equal shapes share one key;
  // the first instance is timed and the measurement stands for all of them.
  std::size_t variants = 1;

  bool operator==(const ProfileRequest&) const = default;
};

// A missing key no request can describe (a backward part whose forward part is unknown).
struct UnresolvedKey {
  ProfileKey key;
  std::string example;
  std::string reason;
  bool operator==(const UnresolvedKey&) const = default;
};

struct ProfileRequests {
  std::vector<ProfileRequest> requests;  // keys the database lacks, in key order
  std::vector<UnresolvedKey> unresolved;  // missing keys without a request, in key order
  std::size_t present = 0;                // distinct keys the database already holds
  std::size_t live_sub_ops = 0;           // sub-ops looked at
};

// The requests of every live sub-op of `plan` whose key `model` (built over `plan`, with the database
// whose gaps are wanted) does not find measured. Keys are on model.gpu().name. Deterministic: the same
// plan and database give the same requests in the same order.
ProfileRequests profile_requests(const plan::Plan& plan, const ComputeModel& model);

// The request file: {"version": 1, "device": ..., "requests": [...]} (docs/profiling.md). `timing` is
// passed through to the timer ({"warmup": 3, "repeats": 10, ...}); empty keys leave its defaults.
std::string requests_to_json(std::span<const ProfileRequest> requests, std::string_view device,
                             const std::map<std::string, double>& timing = {});

// What a timer reported (docs/profiling.md, results file).
struct TimerResults {
  std::string device_type;  // "cuda" or "cpu"
  std::string device_name;  // as torch names it: "NVIDIA H100 80GB HBM3", "cpu"
  std::string torch_version;
  std::vector<std::pair<ProfileKey, double>> measured;  // keys on `device`, seconds
  std::vector<std::pair<ProfileKey, std::string>> unsupported;  // keys on `device`, why not timed
};

// Parses a results file; keys are completed with `device` (the request file's device). Errors name the
// file and the entry.
Expected<TimerResults> parse_timer_results(const std::string& text, const std::string& source,
                                           const std::string& device);

// What merging a timer's results into the database did.
struct MergeSummary {
  std::size_t measured = 0;  // requested keys stored
  std::vector<std::pair<ProfileKey, std::string>> skipped;  // requested keys not timed, with the reason
  std::size_t ignored = 0;   // results nobody asked for (or repeated): not stored
  std::size_t missing = 0;   // requested keys the timer neither measured nor listed as unsupported
};

// Stores the measurements of the requested keys in `db` (a key reported twice keeps its first time) and
// lists what was skipped: the timer's unsupported keys, then `wanted`'s unresolved ones.
MergeSummary merge_results(ProfileDb& db, const ProfileRequests& wanted, const TimerResults& results);

// The database's name for a device torch reports: a known GPU whose model (the first part of its name,
// "H100" of "H100-SXM-80GB") appears in `torch_name` gives that GPU's name; "cpu" stays "cpu"; any other
// name is kept as torch gives it.
std::string profile_device_name(std::string_view torch_name, std::span<const cluster::GpuSpec> known);

}  // namespace loom::cost
