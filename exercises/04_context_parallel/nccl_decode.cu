// Exercise 04 on GPUs: one process per GPU, the partials all-gathered through
// NCCL, then merged on every rank. Built in the GPU flavor when CMake finds
// NCCL (exercises/CMakeLists.txt); run it with run_nccl.sh, which starts one
// process per GPU:
//
//   exercises/04_context_parallel/run_nccl.sh RANKS OUT.json [--batch B] [--ctx N] [--sharding S]
//
// Each rank builds the same batch (same seed), cuts its shard, and times, with
// device events, the step's three parts: local attention (the engine's plan and
// run over the shard, and the partial rows), the all-gather of the partials,
// and the merge. Rank 0 also times the whole batch on its own GPU (the one-GPU
// step), checks the merged output against the fp64 oracle, and writes JSON.
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/check.h"
#include "common/compare.h"
#include "common/device_batch.h"
#include "common/oracle.h"
#include "context_parallel.h"
#include "engine/engine.h"

namespace pa::exercise04 {
namespace {

#define NCCL_OK(x)                                                                                            \
  do {                                                                                                        \
    const ncclResult_t r_ = (x);                                                                              \
    if (r_ != ncclSuccess) throw Error(std::string("NCCL error: ") + ncclGetErrorString(r_) + "\n  in: " #x); \
  } while (0)

struct Args {
  int ranks = 2, rank = 0, batch = 1, ctx = 131072, iters = 20;
  Sharding sharding = Sharding::contiguous;
  std::string id_file, out;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    PA_REQUIRE(i + 1 < argc, "nccl_decode: " + k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--ranks") a.ranks = std::stoi(v);
    else if (k == "--rank") a.rank = std::stoi(v);
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--ctx") a.ctx = std::stoi(v);
    else if (k == "--iters") a.iters = std::stoi(v);
    else if (k == "--id-file") a.id_file = v;
    else if (k == "--out") a.out = v;
    else if (k == "--sharding") {
      PA_REQUIRE(v == "contiguous" || v == "interleaved", "nccl_decode: --sharding contiguous or interleaved");
      a.sharding = v == "contiguous" ? Sharding::contiguous : Sharding::interleaved;
    } else {
      throw Error("nccl_decode: unknown option " + k);
    }
  }
  PA_REQUIRE(!a.id_file.empty(), "nccl_decode: --id-file PATH (rank 0 writes the NCCL id there, the others read it)");
  PA_REQUIRE(a.ranks >= 1 && a.rank >= 0 && a.rank < a.ranks, "nccl_decode: --rank must be in [0, --ranks)");
  return a;
}

// Rank 0 makes the communicator's id and publishes it by rename (atomic); the
// others wait for the file.
ncclUniqueId share_id(const Args& a) {
  ncclUniqueId id;
  if (a.rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    const std::string tmp = a.id_file + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(&id), sizeof id);
    PA_REQUIRE(std::rename(tmp.c_str(), a.id_file.c_str()) == 0, "nccl_decode: cannot write " + a.id_file);
    return id;
  }
  for (int waited_ms = 0;; waited_ms += 50) {
    std::ifstream f(a.id_file, std::ios::binary);
    if (f.read(reinterpret_cast<char*>(&id), sizeof id)) return id;
    PA_REQUIRE(waited_ms < 120000, "nccl_decode: no NCCL id in " + a.id_file + " after 2 minutes (is rank 0 running?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int main_impl(int argc, char** argv) {
  const Args a = parse(argc, argv);
  int devices = 0;
  PA_CHECK(cudaGetDeviceCount(&devices));
  PA_REQUIRE(devices >= a.ranks,
             "nccl_decode: " + std::to_string(a.ranks) + " ranks on " + std::to_string(devices) + " GPUs");
  PA_CHECK(cudaSetDevice(a.rank % devices));
  const ncclUniqueId id = share_id(a);
  ncclComm_t comm;
  NCCL_OK(ncclCommInitRank(&comm, a.ranks, id, a.rank));
  cudaStream_t stream;
  PA_CHECK(cudaStreamCreate(&stream));

  // Qwen3-8B's attention shape, the benchmarks' block size, one decode per request.
  AttentionConfig cfg;
  cfg.num_q_heads = 32;
  cfg.num_kv_heads = 8;
  cfg.head_dim = 128;
  cfg.block_size = 16;
  const Problem whole = make_problem(cfg, decode_requests(a.batch, a.ctx), {.seed = 1});
  const Shard sh = make_shard(whole, a.rank, a.ranks, a.sharding);
  PA_REQUIRE(sh.problem.meta.num_requests() > 0, "nccl_decode: rank " + std::to_string(a.rank) + " holds no key");
  DeviceBatch db(sh.problem, stream);
  db.set_checked(false);
  const AttentionParams sp = db.params();
  const engine::Plan plan = engine::plan(sp, engine::bounds_of(sp.batch));
  DeviceBuffer<unsigned char> ws(std::max<size_t>(plan.workspace_bytes, 1));
  const DeviceBuffer<int> shard_row(sh.shard_row);

  const int rows = whole.meta.num_tokens, hq = cfg.num_q_heads, d = cfg.head_dim;
  const size_t rows_hq = static_cast<size_t>(rows) * hq, row_elems = rows_hq * d;
  DeviceBuffer<bf16> mine_o(row_elems), gathered_o(a.ranks * row_elems);
  DeviceBuffer<float> mine_lse(rows_hq), gathered_lse(a.ranks * rows_hq);
  // The merge writes into the whole batch's out and lse and reads its
  // metadata, which every rank has. (This DeviceBatch also uploads the whole
  // cache, which rank 0 times as the one-GPU step; the other ranks need only
  // the metadata and the outputs.)
  DeviceBatch whole_db(whole, stream);
  whole_db.set_checked(false);
  const AttentionParams wp = whole_db.params();

  DeviceBuffer<int> token(1);  // a one-int all-reduce lines the ranks up before each timed step
  cudaEvent_t ev[4];
  for (cudaEvent_t& e : ev) PA_CHECK(cudaEventCreate(&e));
  std::vector<double> local_ms, comm_ms, merge_ms, step_ms;
  for (int it = 0; it < a.iters + 2; ++it) {  // the first two warm up
    NCCL_OK(ncclAllReduce(token.data(), token.data(), 1, ncclInt32, ncclSum, comm, stream));
    PA_CHECK(cudaStreamSynchronize(stream));
    PA_CHECK(cudaEventRecord(ev[0], stream));
    engine::run(plan, sp, ws.data(), plan.workspace_bytes, stream);
    write_partials(shard_row.data(), rows, hq, d, sp.out, sp.lse, mine_o.data(), mine_lse.data(), stream);
    PA_CHECK(cudaEventRecord(ev[1], stream));
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllGather(mine_o.data(), gathered_o.data(), row_elems * sizeof(bf16), ncclUint8, comm, stream));
    NCCL_OK(ncclAllGather(mine_lse.data(), gathered_lse.data(), rows_hq, ncclFloat32, comm, stream));
    NCCL_OK(ncclGroupEnd());
    PA_CHECK(cudaEventRecord(ev[2], stream));
    merge_ranks(wp, gathered_o.data(), gathered_lse.data(), a.ranks, stream);
    PA_CHECK(cudaEventRecord(ev[3], stream));
    PA_CHECK(cudaEventSynchronize(ev[3]));
    if (it < 2) continue;
    float t[3];
    for (int k = 0; k < 3; ++k) PA_CHECK(cudaEventElapsedTime(&t[k], ev[k], ev[k + 1]));
    local_ms.push_back(t[0]);
    comm_ms.push_back(t[1]);
    merge_ms.push_back(t[2]);
    step_ms.push_back(t[0] + t[1] + t[2]);
  }

  if (a.rank == 0) {
    // The merged answer against the oracle, then the same step on one GPU
    // (over whole_db, whose output the merge no longer needs).
    const OracleResult want = reference_attention(whole);
    const std::vector<float> out = whole_db.out_host(), lse = whole_db.lse_host();
    const AttentionCheck check = check_attention(whole, want, out, &lse);
    const engine::Plan one_plan = engine::plan(wp, engine::bounds_of(wp.batch));
    DeviceBuffer<unsigned char> one_ws(std::max<size_t>(one_plan.workspace_bytes, 1));
    std::vector<double> one_ms;
    for (int it = 0; it < a.iters + 2; ++it) {
      PA_CHECK(cudaEventRecord(ev[0], stream));
      engine::run(one_plan, wp, one_ws.data(), one_plan.workspace_bytes, stream);
      PA_CHECK(cudaEventRecord(ev[1], stream));
      PA_CHECK(cudaEventSynchronize(ev[1]));
      float t;
      PA_CHECK(cudaEventElapsedTime(&t, ev[0], ev[1]));
      if (it >= 2) one_ms.push_back(t);
    }
    const double step = median(step_ms), comm_part = median(comm_ms);
    std::printf("context parallel, %d ranks (%s), %d x %d: step %.4f ms (local %.4f, all-gather %.4f, merge %.4f); "
                "one GPU %.4f ms; communication %.0f%% of the step; against the oracle: %s\n",
                a.ranks, name(a.sharding), a.batch, a.ctx, step, median(local_ms), comm_part, median(merge_ms),
                median(one_ms), 100.0 * comm_part / step, check.ok() ? "ok" : "FAILED");
    if (!check.ok()) std::printf("%s\n", check.report().c_str());
    if (!a.out.empty()) {
      cudaDeviceProp prop{};
      PA_CHECK(cudaGetDeviceProperties(&prop, 0));
      std::ofstream f(a.out);
      f << "{\"device\": \"" << prop.name << "\", \"ranks\": " << a.ranks << ", \"sharding\": \"" << name(a.sharding)
        << "\", \"batch\": " << a.batch << ", \"ctx\": " << a.ctx << ", \"step_ms\": " << step
        << ", \"local_ms\": " << median(local_ms) << ", \"allgather_ms\": " << comm_part
        << ", \"merge_ms\": " << median(merge_ms) << ", \"one_gpu_ms\": " << median(one_ms)
        << ", \"matches_oracle\": " << (check.ok() ? "true" : "false") << "}\n";
    }
    if (!check.ok()) return 1;
  }
  NCCL_OK(ncclCommDestroy(comm));
  return 0;
}

}  // namespace
}  // namespace pa::exercise04

int main(int argc, char** argv) {
  try {
    return pa::exercise04::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_decode: %s\n", e.what());
    return 2;
  }
}
