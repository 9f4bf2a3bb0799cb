// Cluster files: a Cluster written as YAML (JSON is YAML too, so .json files load the same way).
// The schema is in docs/clusters.md; `loom clusters --yaml <preset>` prints a preset in it.
#pragma once

#include <string>
#include <string_view>

#include "loom/cluster/cluster.h"
#include "loom/cluster/link.h"
#include "loom/core/error.h"

namespace loom::cluster {

// Reads and checks a cluster file. A missing file, malformed YAML, a missing, unknown, non-numeric or
// out-of-range field, or an unknown link kind is an Error naming the file and the field, with a hint.
Expected<Cluster> load_cluster_file(const std::string& path);

// The same, from YAML text; `source` names the input in errors (a path, or e.g. "<string>").
Expected<Cluster> parse_cluster_yaml(std::string_view text, std::string_view source);

// The cluster as a YAML document in the schema above, with unit comments. Numbers are written in the
// shortest form that reads back exactly, so parse_cluster_yaml(cluster_to_yaml(c)) == c.
std::string cluster_to_yaml(const Cluster& cluster);

// "nvlink", "nvswitch", "pcie", "infiniband" (or "ib"), "roce"; `local` is not a link between GPUs
// and is refused. The inverse of name(LinkKind).
Expected<LinkKind> parse_link_kind(std::string_view text);

// True for paths ending in .yaml, .yml or .json (what make_cluster treats as a cluster file).
bool is_cluster_file_path(std::string_view text);

}  // namespace loom::cluster
