// The papers' testbeds (REFERENCE.md, "Cluster presets") and the name syntax "<preset>x<nodes>".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/cluster/cluster.h"
#include "loom/core/error.h"

namespace loom::cluster {

// Preset names, in a fixed order: dgx2, dgx1, v100x8, m8, dgx-a100, dgx-h100, rtx3090-nvlink, rtx3090.
std::vector<std::string> preset_names();

// "v100x8" is one node of the preset; "v100x8x2" (or "dgx2x4") is that many nodes. The cluster's
// name is the text given. Unknown presets and bad node counts are errors naming the presets.
// A name ending in .yaml, .yml or .json is a cluster file, read by load_cluster_file (cluster_file.h);
// the cluster's name is then the file's `name` field.
Expected<Cluster> make_cluster(std::string_view name);

}  // namespace loom::cluster
