#include "loom/cluster/presets.h"

#include <gtest/gtest.h>

namespace loom::cluster {
namespace {

TEST(MakeCluster, EveryPresetBuildsOneNode) {
  for (const std::string& name : preset_names()) {
    Expected<Cluster> c = make_cluster(name);
    ASSERT_TRUE(c.has_value()) << name;
    EXPECT_EQ(c->nodes, 1);
    EXPECT_EQ(c->name, name);
    if (name == "cpu-host")  // processes of one machine: gloo over loopback is its only link
      EXPECT_EQ(c->intra, c->inter);
    else
      EXPECT_GT(c->intra.bandwidth, c->inter.bandwidth) << name;
    EXPECT_GT(c->gpu.memory_bytes, 0) << name;
  }
}

TEST(MakeCluster, Dgx2InterNodeBandwidthIsNicTotalOverGpus) {
  Expected<Cluster> c = make_cluster("dgx2x2");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->nodes, 2);
  EXPECT_EQ(c->gpus_per_node, 16);
  EXPECT_EQ(c->device_count(), 32);
  EXPECT_EQ(c->intra.kind, LinkKind::nvswitch);
  EXPECT_DOUBLE_EQ(c->intra.bandwidth, 150e9);  // 300 GB/s both directions
  EXPECT_DOUBLE_EQ(c->inter.bandwidth, 8 * 12.5e9 / 16);
  EXPECT_DOUBLE_EQ(c->node_nic_bandwidth(), 100e9);
}

TEST(MakeCluster, Rtx3090PricedAsGeForce) {
  for (const char* name : {"rtx3090", "rtx3090-nvlink"}) {
    const Cluster c = *make_cluster(name);
    // fp16/bf16 tensor cores with fp32 accumulate (half the fp16-accumulate rate on GeForce Ampere).
    EXPECT_DOUBLE_EQ(c.gpu.peak_fp16, 71e12) << name;
    EXPECT_DOUBLE_EQ(c.gpu.peak_bf16, 71e12) << name;
    EXPECT_DOUBLE_EQ(c.gpu.peak_fp32, 35.6e12) << name;
    // No PCIe peer-to-peer: NCCL's SHM transport, two PCIe 4.0 x16 crossings per hop.
    EXPECT_EQ(c.intra.kind, LinkKind::pcie) << name;
    EXPECT_DOUBLE_EQ(c.intra.bandwidth, 31.5e9 / 2) << name;
    EXPECT_DOUBLE_EQ(c.intra.latency, 2 * 2e-6) << name;
    EXPECT_DOUBLE_EQ(c.inter.bandwidth, 12.5e9 / 4) << name;
  }
  const Cluster bridged = *make_cluster("rtx3090-nvlink");
  ASSERT_TRUE(bridged.bridge.has_value());
  EXPECT_EQ(bridged.bridge->tier, (LinkTier{LinkKind::nvlink, 56.25e9, 1e-6}));  // 112.5 GB/s both directions
  EXPECT_FALSE(make_cluster("rtx3090")->bridge.has_value());
}

TEST(MakeCluster, H200IsH100ComputeWithMoreAndFasterMemory) {
  const Cluster h200 = *make_cluster("dgx-h200");
  const Cluster h100 = *make_cluster("dgx-h100");
  EXPECT_EQ(h200.gpu.name, "H200-SXM-141GB");
  EXPECT_DOUBLE_EQ(h200.gpu.peak_bf16, h100.gpu.peak_bf16);
  EXPECT_DOUBLE_EQ(h200.gpu.peak_fp32, h100.gpu.peak_fp32);
  EXPECT_DOUBLE_EQ(h200.gpu.memory_bandwidth, 4.8e12);
  EXPECT_EQ(h200.gpu.memory_bytes, std::int64_t{140} << 30);
  EXPECT_EQ(h200.intra, h100.intra);
  EXPECT_DOUBLE_EQ(h200.inter.bandwidth, h100.inter.bandwidth);
}

TEST(MakeCluster, NodeCountSuffix) {
  Expected<Cluster> c = make_cluster("v100x8x2");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->nodes, 2);
  EXPECT_EQ(c->gpus_per_node, 8);
  EXPECT_EQ(c->name, "v100x8x2");
  EXPECT_EQ(make_cluster("v100x8")->nodes, 1);
  EXPECT_EQ(make_cluster("dgx-h100x4")->device_count(), 32);
  EXPECT_EQ(make_cluster("m8x3")->inter.kind, LinkKind::roce);
}

TEST(MakeCluster, UnknownPresetListsPresets) {
  Expected<Cluster> c = make_cluster("tpu-v4x2");
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().message, "unknown cluster 'tpu-v4x2'");
  EXPECT_NE(c.error().hint.find("dgx2, dgx1, v100x8"), std::string::npos);
}

TEST(MakeCluster, BadNodeCount) {
  EXPECT_FALSE(make_cluster("v100x8x0").has_value());
  EXPECT_FALSE(make_cluster("v100x8x-1").has_value());
  EXPECT_FALSE(make_cluster("v100x8x2a").has_value());
  EXPECT_FALSE(make_cluster("x2").has_value());
  EXPECT_NE(make_cluster("dgx2x0").error().message.find("bad node count"), std::string::npos);
}

}  // namespace
}  // namespace loom::cluster
