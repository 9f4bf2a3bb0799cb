// Cluster files (--cluster FILE.yaml|.json): cluster::parse_cluster_yaml, which load_cluster_file calls
// on the file's bytes. Law: parse_cluster_yaml(cluster_to_yaml(c)) == c (cluster_file.h).
#include "fuzz_input.h"
#include "loom/cluster/cluster_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = loom::fuzz::text_of(data, size);
  const loom::Expected<loom::cluster::Cluster> cluster = loom::cluster::parse_cluster_yaml(text, "<fuzz>");
  if (!cluster) return 0;
  const auto again = loom::cluster::parse_cluster_yaml(loom::cluster::cluster_to_yaml(*cluster), "<printed>");
  LOOM_FUZZ_LAW(again && *again == *cluster);
  return 0;
}
