// Pipeline schedules as order requests (order_request.h): the blocks (stage, micro-batch, part) of
// plan/schedule.h, their data flow, memory and nnScaler's order constraints, solved by the order search
// (order_search.h) and turned back into a template that plan::evaluate_schedule, the independent
// evaluator of templates, re-times.
//
// P passes over S devices: pass p of device d is stage p * S + d (P = 1: a plain pipeline, stage d on
// device d; P > 1: nnScaler's 3F1B, plan/schedule_3f1b.h). Blocks: the forward of every stage, and the
// backward of the last pass's stages (whole, or its input part B and weight part W apart). Data flow:
// F(v, k) after F(v - 1, k); B(v, k) after F(v, k) and B(v + 1, k); W(v, k) after B(v, k). Each stream
// (a stage's forwards, backwards, weights) runs in micro-batch order, as every template does (rule
// "micro-batch order"). A last-pass forward holds one unit of activations until its whole backward, or
// its W, ends; the earlier passes hold none (as evaluate_schedule counts). Durations: the block costs in
// integer ticks (the least of 1, 10, 100, 1000 ticks per unit that makes them whole; else rounded at 1000).
#pragma once

#include <vector>

#include "loom/core/error.h"
#include "loom/plan/schedule.h"
#include "loom/plan/schedule_eval.h"
#include "loom/search/order_search.h"

namespace loom::search {

struct PipelineOrderShape {
  int devices = 1;
  int passes = 1;           // model passes; only the last has a backward
  int micro_batches = 1;
  plan::BlockCosts costs;   // F, B and W; the whole backward costs backward + weight
  bool split_backward = false;
  // nnScaler Table 7's order constraints on device d (ofst = S - 1 - d):
  //   (1), (2)  F(p, j) before F(p + 1, j - 1)   for p < P - 1 and max(P - 1, 1) <= j < m
  //   (3)       F(P - 1, j) before B(j - ofst)    for ofst < j < m
  bool table7 = false;
  // With P >= 2, at most S - d + recycles_ahead micro-batches in flight on device d (first forward begun,
  // backward not ended; plan/schedule_3f1b.h's bound): B(j - that) before F(0, j) (rule "in flight").
  // -1: no bound (the earlier passes' forwards may then run arbitrarily far ahead, which the search pays
  // for in pairs to order).
  int recycles_ahead = -1;
  std::vector<std::int64_t> memory_caps;  // per device, in activation units; empty: 1F1B's S - d
  OrderBudget budget;
  bool greedy_upper_bound = true;  // OrderRequest's
  // With table7 and P >= 2: the pilot search's template (plan::search_three_f_one_b) as the initial
  // order where it keeps the request's constraints and caps, so the answer is never slower than it.
  bool pilot_upper_bound = true;
};

struct PipelineRequest {
  OrderRequest request;
  std::vector<plan::Block> blocks;  // per request block, the pipeline block it is
  int ticks_per_unit = 1;
};

// Errors: fewer than 1 device, pass or micro-batch; a cost not above 0 (W only when split) or not finite;
// caps not one per device.
Expected<PipelineRequest> pipeline_request(const PipelineOrderShape& shape);

// A template as an order of the request's blocks. Errors: a block the request does not have.
Expected<std::vector<std::vector<int>>> pipeline_order(const PipelineRequest& pipeline,
                                                       const std::vector<std::vector<plan::Block>>& devices);

struct PipelineOrder {
  std::vector<std::vector<plan::Block>> devices;  // per device, its blocks in order (a template)
  plan::ScheduleEvaluation evaluation;            // evaluate_schedule's numbers on the shape's costs
  OrderSolution solution;                         // the search's, in ticks
  int ticks_per_unit = 1;
};

// The least-makespan template for the shape (solve_order), re-timed by plan::evaluate_schedule. With
// table7 and P >= 2 it is also checked against plan::three_f_one_b_violations. Errors: pipeline_request's,
// solve_order's, and a template either evaluator refuses (reported, not asserted).
Expected<PipelineOrder> search_pipeline_order(const PipelineOrderShape& shape);

}  // namespace loom::search
