#include "loom/cluster/cluster.h"

#include <vector>

#include <gtest/gtest.h>

#include "loom/cluster/presets.h"

namespace loom::cluster {
namespace {

Cluster preset(std::string_view name) {
  Expected<Cluster> c = make_cluster(name);
  EXPECT_TRUE(c.has_value()) << c.error().to_string();
  return *c;
}

TEST(LinkBetween, SameNodeUsesIntraTierAcrossNodesInter) {
  const Cluster c = preset("v100x8x2");
  EXPECT_EQ(link_between(c, 3, 3).kind, LinkKind::local);
  EXPECT_EQ(link_between(c, 0, 7).kind, LinkKind::nvlink);
  EXPECT_EQ(link_between(c, 7, 8).kind, LinkKind::infiniband);
  EXPECT_DOUBLE_EQ(link_between(c, 7, 8).bandwidth, 12.5e9 / 8);
}

TEST(LinkBetween, Rtx3090BridgeOnlyBetweenPairs) {
  const Cluster c = preset("rtx3090-nvlinkx2");
  EXPECT_EQ(link_between(c, 0, 1).kind, LinkKind::nvlink);
  EXPECT_EQ(link_between(c, 2, 3).kind, LinkKind::nvlink);
  EXPECT_EQ(link_between(c, 1, 2).kind, LinkKind::pcie);
  EXPECT_EQ(link_between(c, 0, 3).kind, LinkKind::pcie);
  EXPECT_EQ(link_between(c, 4, 5).kind, LinkKind::nvlink);  // node 1, local GPUs 0 and 1
  EXPECT_EQ(link_between(c, 3, 4).kind, LinkKind::infiniband);
  const Cluster plain = preset("rtx3090");
  EXPECT_EQ(link_between(plain, 0, 1).kind, LinkKind::pcie);
}

TEST(GroupLink, SlowestLinkTheGroupSpans) {
  const Cluster c = preset("rtx3090-nvlinkx2");
  EXPECT_EQ(group_link(c, std::vector<int>{0, 1}).kind, LinkKind::nvlink);
  EXPECT_EQ(group_link(c, std::vector<int>{0, 1, 2}).kind, LinkKind::pcie);
  EXPECT_EQ(group_link(c, std::vector<int>{0, 4}).kind, LinkKind::infiniband);
  EXPECT_EQ(group_link(c, std::vector<int>{5}).kind, LinkKind::local);
  EXPECT_EQ(nodes_spanned(c, std::vector<int>{0, 1, 4, 7}), 2);
}

TEST(PeakFlops, PerPrecision) {
  const Cluster c = preset("dgx2");
  EXPECT_DOUBLE_EQ(peak_flops(c.gpu, Precision::fp16), 125e12);
  EXPECT_DOUBLE_EQ(peak_flops(c.gpu, Precision::fp32), 15.7e12);
  EXPECT_DOUBLE_EQ(peak_flops(c.gpu, Precision::bf16), 0);  // V100 has no bf16 tensor path
  EXPECT_DOUBLE_EQ(peak_flops(preset("dgx-h100").gpu, Precision::bf16), 989e12);
  EXPECT_EQ(parse_precision("f32"), Precision::fp32);
  EXPECT_FALSE(parse_precision("f8").has_value());
}

}  // namespace
}  // namespace loom::cluster
