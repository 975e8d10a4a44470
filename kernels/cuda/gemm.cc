#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemv.h"
#include "spdlog/spdlog.h"

namespace xserv::kernels::cuda {
namespace {

absl::Status LtStatus(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cublasLtGetStatusName(status), " (",
                                          cublasLtGetStatusString(status), ")"));
}

#define RETURN_IF_LT_ERROR(expr) RETURN_IF_ERROR(LtStatus((expr), #expr))

cudaDataType_t CudaType(ElemType t) {
  switch (t) {
    case ElemType::kF32: return CUDA_R_32F;
    case ElemType::kBF16: return CUDA_R_16BF;
    case ElemType::kF16: return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

// Largest power of two (<= 256) dividing the address: what cuBLASLt may assume about it.
int Alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// The workspace limit and what the operands' addresses guarantee (a column slice may be less
// aligned than a fresh allocation): A = w, B = x, C = D = out.
cublasStatus_t SetWorkspaceAndAlignments(cublasLtMatmulPreference_t pref, uint64_t workspace,
                                         const void* w, const void* x, const void* out) {
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  const uint32_t align_w = Alignment(w), align_x = Alignment(x), align_out = Alignment(out);
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const uint32_t*> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_w},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_x},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_out},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_out}};
  for (const auto& [attribute, value] : alignments) {
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulPreferenceSetAttribute(pref, attribute, value, sizeof(*value));
    }
  }
  return st;
}

// autotune: how many of the heuristic's candidates are timed, and how many of them get the
// cluster variants below.
constexpr int kAutotuneCandidates = 32;
constexpr int kAutotuneClusterCandidates = 8;
// autotune: the bf16 candidates are timed with these thread-block cluster shapes too. cuBLASLt's
// M is our n (weight rows) and its N our m (tokens), so 1x2 pairs the CTAs of two token tiles
// over one weight tile, whose loads a cluster can share, as at m = 256 two 128-token tiles read
// every weight tile twice otherwise. Its heuristic does not always pick that: in the graphed
// Qwen3-8B step at 256 rows (docs/benchmarks session 25) the gate_up kernel's name reads 1x2
// (655 TFLOP/s), qkv's 2x1 (552), o's 1x2 too (504: a 128x64 tile).
constexpr uint16_t kClusterShapes[] = {CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                                       CUBLASLT_CLUSTER_SHAPE_2x1x1};
// autotune: at most this many further configurations (the tiles and stage counts each of the
// heuristic's algorithms lists as capabilities, GemmRunner::ConfigVariants) per shape. The
// heuristic ranks by a model: at m = 256 its picks leave the H200's 132 SMs partly idle on the
// narrower projections (o: 128 CTAs of 128x64; docs/benchmarks session 25).
constexpr size_t kAutotuneMaxConfigVariants = 384;
// autotune: a candidate's timed launches each follow a read of this many bytes, which evicts the
// weights from L2 (50 MB on an H200): in a step each matmul reads its weight from HBM, and a
// candidate timed on an L2-resident weight looks faster than it will run. A read, not a write:
// the dirty lines a memset leaves are written back during the timed launch, which then ran
// Qwen3-8B's o projection at 256 rows in 24 us against 17 in the step (session 26).
constexpr size_t kAutotuneL2FlushBytes = 128 << 20;
// autotune: the first pass stops after this much GPU time of timed launches (a candidate each);
// the fastest kAutotuneRefined of it are timed again kAutotuneRefineRuns times each.
constexpr double kAutotuneBudgetUs = 400e3;
constexpr size_t kAutotuneRefined = 8;
constexpr int kAutotuneRefineRuns = 3;
// autotune: the least fraction by which a candidate must beat the heuristic's first pick.
constexpr float kAutotuneMinGain = 0.03f;

// Whether `stream` is being captured into a graph, which records launches instead of running
// them: no timing there.
absl::StatusOr<bool> Capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RETURN_IF_CUDA_ERROR(cudaStreamIsCapturing(stream, &capture));
  return capture != cudaStreamCaptureStatusNone;
}

// An algorithm's configuration attributes, for the autotune log line and to tell variants apart.
struct AlgoSettings {
  int32_t id = 0, tile = 0, stages = 0, split_k = 1;
  uint32_t swizzle = 0, custom = 0;
  uint16_t cluster = 0;

  auto Tuple() const { return std::tie(id, tile, stages, split_k, swizzle, custom, cluster); }
  bool operator<(const AlgoSettings& o) const { return Tuple() < o.Tuple(); }
};

AlgoSettings SettingsOf(const cublasLtMatmulAlgo_t& algo) {
  AlgoSettings s;
  size_t written = 0;
  const auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attribute, auto* value) {
    cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, value, sizeof(*value), &written);
  };
  get(CUBLASLT_ALGO_CONFIG_ID, &s.id);
  get(CUBLASLT_ALGO_CONFIG_TILE_ID, &s.tile);
  get(CUBLASLT_ALGO_CONFIG_STAGES_ID, &s.stages);
  get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s.split_k);
  get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &s.swizzle);
  get(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &s.custom);
  get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &s.cluster);
  return s;
}

std::string AlgoConfig(const cublasLtMatmulAlgo_t& algo) {
  const AlgoSettings s = SettingsOf(algo);
  return absl::StrCat("algo ", s.id, " tile ", s.tile, " stages ", s.stages, " splitk ",
                      s.split_k, " cluster ", s.cluster);
}

// Sets one configuration attribute of `algo`; false when cuBLASLt refuses the value.
template <typename T>
bool SetConfig(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute,
               T value) {
  return cublasLtMatmulAlgoConfigSetAttribute(&algo, attribute, &value, sizeof(value)) ==
         CUBLAS_STATUS_SUCCESS;
}

// The values of an array capability of `algo` (tile or stage ids); empty when it lists none.
std::vector<uint32_t> CapabilityIds(const cublasLtMatmulAlgo_t& algo,
                                    cublasLtMatmulAlgoCapAttributes_t attribute) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, nullptr, 0, &bytes) !=
          CUBLAS_STATUS_SUCCESS ||
      bytes == 0) {
    return {};
  }
  std::vector<uint32_t> ids(bytes / sizeof(uint32_t));
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, ids.data(), ids.size() * sizeof(uint32_t),
                                        &bytes) != CUBLAS_STATUS_SUCCESS) {
    return {};
  }
  return ids;
}

}  // namespace

struct GemmRunner::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr, x_layout = nullptr, out_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};

  ~Plan() {
    if (out_layout) cublasLtMatrixLayoutDestroy(out_layout);
    if (x_layout) cublasLtMatrixLayoutDestroy(x_layout);
    if (w_layout) cublasLtMatrixLayoutDestroy(w_layout);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

absl::StatusOr<std::unique_ptr<GemmRunner>> GemmRunner::Create(const GemmOptions& options) {
  std::unique_ptr<GemmRunner> runner(new GemmRunner(options));
  RETURN_IF_LT_ERROR(cublasLtCreate(&runner->handle_));
  RETURN_IF_CUDA_ERROR(cudaMalloc(&runner->workspace_, kWorkspaceBytes));
  return runner;
}

GemmRunner::GemmRunner(const GemmOptions& options) : options_(options) {}

GemmRunner::~GemmRunner() {
  plans_.clear();
  if (l2_flush_ != nullptr) cudaFree(l2_flush_);
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

// cuBLASLt is column-major. Row-major out[m, n] is column-major out^T [n, m] (ld = ldo), so we ask
// for out^T = w · x^T: A = w seen column-major as [k, n] (ld = ldw) with op T, B = x seen
// column-major as [k, m] (ld = ldx) with op N. The bias epilogue adds bias[row of D] = bias[n].
absl::Status GemmRunner::Describe(const GemmCall& c, bool epilogue_bias, Plan& plan_ref) {
  Plan* plan = &plan_ref;
  RETURN_IF_LT_ERROR(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  RETURN_IF_LT_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t,
                                                    sizeof(op_t)));
  RETURN_IF_LT_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n,
                                                    sizeof(op_n)));
  if (epilogue_bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    RETURN_IF_LT_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    const cudaDataType_t bias_type = CudaType(c.bias_type);
    RETURN_IF_LT_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  RETURN_IF_LT_ERROR(cublasLtMatrixLayoutCreate(&plan->w_layout, CUDA_R_16BF, c.k, c.n, c.ldw));
  RETURN_IF_LT_ERROR(cublasLtMatrixLayoutCreate(&plan->x_layout, CUDA_R_16BF, c.k, c.m, c.ldx));
  RETURN_IF_LT_ERROR(
      cublasLtMatrixLayoutCreate(&plan->out_layout, CudaType(c.out_type), c.n, c.m, c.ldo));
  return absl::OkStatus();
}

cublasStatus_t GemmRunner::Launch(const Plan& plan, const cublasLtMatmulAlgo_t& algo,
                                  const void* w, const void* x, void* out, cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(handle_, plan.desc, &alpha, w, plan.w_layout, x, plan.x_layout, &beta, out,
                        plan.out_layout, out, plan.out_layout, &algo, workspace_, kWorkspaceBytes,
                        stream);
}

absl::StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>> GemmRunner::Candidates(
    const Plan& plan, const void* w, const void* x, const void* out, bool no_split_k, int max) {
  cublasLtMatmulPreference_t pref = nullptr;
  RETURN_IF_LT_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = kWorkspaceBytes;
  // Split-K with a reduction pass sums partial products across CTAs in an order that depends on
  // the grid; NONE keeps each element's k-loop inside one CTA.
  const uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_NONE;
  cublasStatus_t st = SetWorkspaceAndAlignments(pref, workspace, w, x, out);
  if (st == CUBLAS_STATUS_SUCCESS && no_split_k) {
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                              &reduction_mask, sizeof(reduction_mask));
  }
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(max));
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.w_layout, plan.x_layout,
                                        plan.out_layout, plan.out_layout, pref, max,
                                        results.data(), &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  RETURN_IF_LT_ERROR(st);
  results.resize(static_cast<size_t>(found));
  return results;
}

bool GemmRunner::AlgoFits(const Plan& plan, cublasLtMatmulAlgo_t algo, cublasStatus_t* status) {
  cublasLtMatmulHeuristicResult_t check{};
  const cublasStatus_t st = cublasLtMatmulAlgoCheck(handle_, plan.desc, plan.w_layout,
                                                    plan.x_layout, plan.out_layout,
                                                    plan.out_layout, &algo, &check);
  if (status != nullptr) *status = st;
  return st == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= kWorkspaceBytes;
}

absl::StatusOr<cublasLtMatmulAlgo_t> GemmRunner::ChooseAlgo(const GemmCall& c, const Plan& plan,
                                                            bool no_split_k) {
  constexpr int kCandidates = 16;
  ASSIGN_OR_RETURN(const std::vector<cublasLtMatmulHeuristicResult_t> results,
                   Candidates(plan, c.w, c.x, c.out, no_split_k, no_split_k ? kCandidates : 1));
  for (const cublasLtMatmulHeuristicResult_t& r : results) {
    if (!no_split_k) return r.algo;
    int32_t split_k = 1;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split_k,
                                             sizeof(split_k), &written) == CUBLAS_STATUS_SUCCESS &&
        split_k <= 1) {
      return r.algo;
    }
  }
  return absl::UnimplementedError(absl::StrCat(
      "Matmul: cuBLASLt has no ", no_split_k ? "split-K-free " : "", "algorithm for m=", c.m,
      " n=", c.n, " k=", c.k, " ldx=", c.ldx, " ldw=", c.ldw, " ldo=", c.ldo));
}

absl::StatusOr<int> GemmRunner::FastestOf(
    const Plan& plan, const std::vector<cublasLtMatmulHeuristicResult_t>& results, const void* w,
    const void* x, void* out, cudaStream_t stream, absl::string_view label) {
  constexpr size_t kLoggedFastest = 6;
  // Its contents do not matter: it is only read.
  if (l2_flush_ == nullptr) RETURN_IF_CUDA_ERROR(cudaMalloc(&l2_flush_, kAutotuneL2FlushBytes));
  cudaEvent_t start = nullptr, stop = nullptr;
  RETURN_IF_CUDA_ERROR(cudaEventCreate(&start));
  if (const cudaError_t err = cudaEventCreate(&stop); err != cudaSuccess) {
    cudaEventDestroy(start);
    RETURN_IF_CUDA_ERROR(err);
  }
  absl::Status status;
  // Candidate i's mean over `runs` launches, each after the L2 flush, in us; < 0: it cannot run.
  const auto time = [&](size_t i, int runs) -> float {
    float total_ms = 0.0f;
    for (int r = 0; r < runs && status.ok(); ++r) {
      LaunchReadSweep(l2_flush_, kAutotuneL2FlushBytes,
                      static_cast<uint32_t*>(l2_flush_), stream);
      cudaEventRecord(start, stream);
      if (Launch(plan, results[i].algo, w, x, out, stream) != CUBLAS_STATUS_SUCCESS) return -1.0f;
      cudaEventRecord(stop, stream);
      float ms = 0.0f;
      if (const cudaError_t err = cudaEventSynchronize(stop); err != cudaSuccess) {
        status = absl::InternalError(absl::StrCat("Matmul autotune: ", cudaGetErrorString(err)));
      }
      cudaEventElapsedTime(&ms, start, stop);
      total_ms += ms;
    }
    return 1e3f * total_ms / runs;
  };
  // A first pass times each candidate once after an untimed launch (which also loads its
  // kernel: CUDA loads modules lazily), in order, until the pass has spent its budget (a prefill
  // GEMM of tens of thousands of rows takes milliseconds a launch); the fastest few then run
  // kAutotuneRefineRuns times each, and the best mean wins.
  std::vector<std::pair<float, int>> timed;  // (us, index)
  double spent_us = 0.0;
  for (size_t i = 0; i < results.size() && status.ok() && spent_us < kAutotuneBudgetUs; ++i) {
    if (Launch(plan, results[i].algo, w, x, out, stream) != CUBLAS_STATUS_SUCCESS) continue;
    const float us = time(i, 1);
    if (us < 0.0f) continue;  // a candidate that cannot run is skipped
    timed.emplace_back(us, static_cast<int>(i));
    spent_us += 2.0 * us;
  }
  const size_t first_pass = timed.size();
  const float heuristic_us = !timed.empty() && timed.front().second == 0 ? timed.front().first
                                                                          : -1.0f;
  std::sort(timed.begin(), timed.end());
  if (timed.size() > kAutotuneRefined) timed.resize(kAutotuneRefined);
  const auto is_heuristic = [](const std::pair<float, int>& t) { return t.second == 0; };
  if (heuristic_us >= 0.0f && std::none_of(timed.begin(), timed.end(), is_heuristic)) {
    timed.emplace_back(heuristic_us, 0);  // refined too: the pick the others must beat
  }
  for (auto& [us, i] : timed) {
    const float mean = status.ok() ? time(static_cast<size_t>(i), kAutotuneRefineRuns) : -1.0f;
    us = mean < 0.0f ? INFINITY : mean;  // ran before, so unlikely; never the winner then
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  RETURN_IF_ERROR(status);
  if (timed.empty()) return -1;
  std::sort(timed.begin(), timed.end());
  // The heuristic's pick stays unless another beats it clearly: a timing apart from the step
  // misjudges small differences (Qwen3-8B at 256 rows: picks 1-4 % faster alone made the graphed
  // step 1 % slower, session 26).
  int best = timed.front().second;
  const auto heuristic = std::find_if(timed.begin(), timed.end(), is_heuristic);
  if (heuristic != timed.end() && timed.front().first > heuristic->first * (1 - kAutotuneMinGain)) {
    best = 0;
  }
  std::vector<std::string> fastest;  // for the log line
  for (size_t j = 0; j < std::min(timed.size(), kLoggedFastest); ++j) {
    const auto [us, i] = timed[j];
    fastest.push_back(absl::StrCat("#", i, " ", AlgoConfig(results[static_cast<size_t>(i)].algo),
                                   " ", absl::SixDigits(us), " us"));
  }
  spdlog::info("GEMM autotune {}: {} of {} candidates timed, the heuristic's first once {} us; "
               "kept #{}; fastest: {}",
               std::string(label), first_pass, results.size(),
               absl::StrCat(absl::SixDigits(heuristic_us)), best, absl::StrJoin(fastest, ", "));
  return best;
}

std::vector<cublasLtMatmulHeuristicResult_t> GemmRunner::ClusterVariants(
    const Plan& plan, const std::vector<cublasLtMatmulHeuristicResult_t>& results) {
  std::vector<cublasLtMatmulHeuristicResult_t> variants;
  const size_t count = std::min(results.size(), static_cast<size_t>(kAutotuneClusterCandidates));
  for (size_t i = 0; i < count; ++i) {
    const cublasLtMatmulHeuristicResult_t& r = results[i];
    const uint16_t current = SettingsOf(r.algo).cluster;
    for (const uint16_t shape : kClusterShapes) {
      if (shape == current) continue;
      cublasLtMatmulHeuristicResult_t variant = r;
      if (SetConfig(variant.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, shape) &&
          AlgoFits(plan, variant.algo)) {
        variants.push_back(variant);
      }
    }
  }
  return variants;
}

std::vector<cublasLtMatmulHeuristicResult_t> GemmRunner::ConfigVariants(
    const Plan& plan, const std::vector<cublasLtMatmulHeuristicResult_t>& results) {
  std::set<AlgoSettings> seen;
  for (const cublasLtMatmulHeuristicResult_t& r : results) seen.insert(SettingsOf(r.algo));
  std::set<int32_t> algo_ids;
  std::vector<cublasLtMatmulHeuristicResult_t> variants;
  for (const cublasLtMatmulHeuristicResult_t& r : results) {
    if (!algo_ids.insert(SettingsOf(r.algo).id).second) continue;  // one algorithm's once
    const std::vector<uint32_t> tiles = CapabilityIds(r.algo, CUBLASLT_ALGO_CAP_TILE_IDS);
    const std::vector<uint32_t> stages = CapabilityIds(r.algo, CUBLASLT_ALGO_CAP_STAGES_IDS);
    for (const uint32_t tile : tiles) {
      for (const uint32_t stage : stages) {
        for (const uint16_t shape : kClusterShapes) {
          if (variants.size() >= kAutotuneMaxConfigVariants) return variants;
          cublasLtMatmulHeuristicResult_t variant = r;
          cublasLtMatmulAlgo_t& algo = variant.algo;
          if (SetConfig(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, tile) &&
              SetConfig(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, stage) &&
              SetConfig(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, shape) &&
              seen.insert(SettingsOf(algo)).second && AlgoFits(plan, algo)) {
            variants.push_back(variant);
          }
        }
      }
    }
  }
  return variants;
}

absl::StatusOr<cublasLtMatmulAlgo_t> GemmRunner::TimeCandidates(const GemmCall& c,
                                                                const Plan& plan,
                                                                cudaStream_t stream) {
  ASSIGN_OR_RETURN(std::vector<cublasLtMatmulHeuristicResult_t> results,
                   Candidates(plan, c.w, c.x, c.out, /*no_split_k=*/false, kAutotuneCandidates));
  const std::vector<cublasLtMatmulHeuristicResult_t> clusters = ClusterVariants(plan, results);
  results.insert(results.end(), clusters.begin(), clusters.end());
  // After the cluster variants, which it then skips rather than timing them twice.
  const std::vector<cublasLtMatmulHeuristicResult_t> configs = ConfigVariants(plan, results);
  results.insert(results.end(), configs.begin(), configs.end());
  ASSIGN_OR_RETURN(const int best,
                   FastestOf(plan, results, c.w, c.x, c.out, stream,
                             absl::StrCat("bf16 m=", c.m, " n=", c.n, " k=", c.k)));
  if (best < 0) return ChooseAlgo(c, plan, /*no_split_k=*/false);  // its error message
  return results[static_cast<size_t>(best)].algo;
}

absl::StatusOr<cublasLtMatmulAlgo_t> GemmRunner::TunedAlgo(const GemmCall& c, const Key& key,
                                                           bool epilogue_bias, const Plan& plan,
                                                           cudaStream_t stream) {
  // One timing per (family, power-of-two bucket of m); other m of the bucket reuse the winner
  // where cuBLASLt confirms it supports them.
  Key bucket_key = key;
  int64_t bucket = 1;
  while (bucket < c.m) bucket *= 2;
  std::get<0>(bucket_key) = bucket;
  if (auto it = tuned_algos_.find(bucket_key); it != tuned_algos_.end()) {
    if (AlgoFits(plan, it->second)) return it->second;
    return ChooseAlgo(c, plan, /*no_split_k=*/false);
  }
  ASSIGN_OR_RETURN(const bool capturing, Capturing(stream));
  if (capturing) return ChooseAlgo(c, plan, /*no_split_k=*/false);
  if (epilogue_bias) {  // the candidates run with the call's bias, as Run will
    RETURN_IF_LT_ERROR(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &c.bias, sizeof(c.bias)));
  }
  ASSIGN_OR_RETURN(const cublasLtMatmulAlgo_t algo, TimeCandidates(c, plan, stream));
  tuned_algos_.emplace(bucket_key, algo);
  return algo;
}

absl::StatusOr<GemmRunner::Plan*> GemmRunner::GetPlan(const GemmCall& c, bool epilogue_bias,
                                                      cudaStream_t stream) {
  Key key{c.m,
          c.n,
          c.k,
          c.ldx,
          c.ldw,
          c.ldo,
          static_cast<int>(c.out_type),
          epilogue_bias,
          Alignment(c.x),
          Alignment(c.w),
          Alignment(c.out),
          epilogue_bias ? Alignment(c.bias) : 0};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();

  auto plan = std::make_unique<Plan>();
  RETURN_IF_ERROR(Describe(c, epilogue_bias, *plan));
  if (!options_.batch_invariant && options_.autotune) {
    ASSIGN_OR_RETURN(plan->algo, TunedAlgo(c, key, epilogue_bias, *plan, stream));
  } else if (!options_.batch_invariant) {
    ASSIGN_OR_RETURN(plan->algo, ChooseAlgo(c, *plan, /*no_split_k=*/false));
  } else {
    Key family = key;
    std::get<0>(family) = 0;
    auto it = invariant_algos_.find(family);
    if (it == invariant_algos_.end()) {
      GemmCall reference = c;
      reference.m = options_.invariant_reference_rows;
      Plan reference_plan;
      RETURN_IF_ERROR(Describe(reference, epilogue_bias, reference_plan));
      ASSIGN_OR_RETURN(cublasLtMatmulAlgo_t algo,
                       ChooseAlgo(reference, reference_plan, /*no_split_k=*/true));
      it = invariant_algos_.emplace(family, algo).first;
    }
    plan->algo = it->second;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (!AlgoFits(*plan, plan->algo, &st)) {
      return absl::UnimplementedError(absl::StrCat(
          "Matmul (batch-invariant): the algorithm chosen for n=", c.n, " k=", c.k,
          " does not support m=", c.m, ": ", cublasLtGetStatusName(st)));
    }
  }
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

GemvArgs GemvArgsFrom(const GemmCall& c, bool pdl) {
  return GemvArgs{.x = c.x,
                  .ldx = c.ldx,
                  .w = c.w,
                  .ldw = c.ldw,
                  .out = c.out,
                  .ldo = c.ldo,
                  .out_type = c.out_type,
                  .bias = c.bias,
                  .bias_type = c.bias_type,
                  .m = static_cast<int>(c.m),
                  .n = static_cast<int>(c.n),
                  .k = static_cast<int>(c.k),
                  .pdl = pdl,
                  .prefetch = c.prefetch,
                  .own_prefetch_bytes = c.own_prefetch_bytes};
}

std::optional<GemvArgs> GemvArgsOf(const GemmCall& c, bool pdl, bool glu) {
  if (c.n > INT32_MAX || c.k > INT32_MAX) return std::nullopt;
  GemvArgs gemv = GemvArgsFrom(c, pdl);
  gemv.glu = glu;
  if (!GemvSupports(gemv)) return std::nullopt;
  return gemv;
}

absl::Status GemmRunner::Run(const GemmCall& c, cudaStream_t stream) {
  if (c.m == 0 || c.n == 0) return absl::OkStatus();
  // Weights this small (a MoE router's 32 x 2880) leave cuBLASLt's kernels launch- and
  // tail-bound (11.5 us for 184 KB on an H200, 16 GB/s): the GEMV takes them whatever
  // options_.gemv says.
  const bool small_weights = c.n * c.k * 2 <= kGemvSmallWeightBytes;
  if (((options_.gemv && c.m == 1) || small_weights) && !options_.batch_invariant &&
      c.m <= kGemvMaxRows) {
    if (const std::optional<GemvArgs> gemv =
            GemvArgsOf(c, options_.pdl && !c.w_from_stream)) {
      RETURN_IF_CUDA_ERROR(LaunchGemv(*gemv, stream));
      return absl::OkStatus();
    }
  }
  // The epilogue adds a bf16 bias in fp32 before the single rounding of a bf16 output; other
  // combinations (f32 logits, router logits) take the separate bias kernel, which costs an f32
  // output no precision.
  const bool epilogue_bias = c.bias != nullptr && c.out_type == ElemType::kBF16 &&
                             c.bias_type == ElemType::kBF16;
  ASSIGN_OR_RETURN(Plan * plan, GetPlan(c, epilogue_bias, stream));
  if (epilogue_bias) {
    RETURN_IF_LT_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof(c.bias)));
  }
  RETURN_IF_LT_ERROR(Launch(*plan, plan->algo, c.w, c.x, c.out, stream));
  if (c.bias != nullptr && !epilogue_bias) {
    const RowsView out{c.out, c.m, c.n, c.ldo};
    RETURN_IF_CUDA_ERROR(LaunchAddBias(out, c.out_type, c.bias, c.bias_type, stream));
  }
  return absl::OkStatus();
}

absl::Status GemmRunner::RunFp8(const Fp8GemmCall& c, cudaStream_t stream) {
  if (c.m == 0 || c.n == 0) return absl::OkStatus();
  auto refused = [&] {
    return absl::UnimplementedError(absl::StrCat("MatmulFp8: cuBLASLt has no FP8 block-scaled "
                                                 "algorithm for m=", c.m, " n=", c.n, " k=",
                                                 c.k));
  };
  const Fp8Key key{c.m, c.n, c.k, c.ldo, Alignment(c.out), c.w_row_scales, c.out_f32};
  auto it = fp8_plans_.find(key);
  const bool fresh = it == fp8_plans_.end();
  if (fresh) {
    auto plan = std::make_unique<Plan>();
    RETURN_IF_LT_ERROR(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    // The weights (A) carry 128 x 128 block scales (or the same per row), the activations (B)
    // one per row and 128 columns.
    const int32_t a_mode = c.w_row_scales ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                          : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    RETURN_IF_LT_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                      &transa, sizeof(transa)));
    RETURN_IF_LT_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                      &transb, sizeof(transb)));
    RETURN_IF_LT_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                      &a_mode, sizeof(a_mode)));
    RETURN_IF_LT_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                                      &b_mode, sizeof(b_mode)));
    RETURN_IF_LT_ERROR(cublasLtMatrixLayoutCreate(&plan->w_layout, CUDA_R_8F_E4M3,
                                                  static_cast<uint64_t>(c.k),
                                                  static_cast<uint64_t>(c.n), c.k));
    RETURN_IF_LT_ERROR(cublasLtMatrixLayoutCreate(&plan->x_layout, CUDA_R_8F_E4M3,
                                                  static_cast<uint64_t>(c.k),
                                                  static_cast<uint64_t>(c.m), c.k));
    RETURN_IF_LT_ERROR(cublasLtMatrixLayoutCreate(&plan->out_layout,
                                                  c.out_f32 ? CUDA_R_32F : CUDA_R_16BF,
                                                  static_cast<uint64_t>(c.n),
                                                  static_cast<uint64_t>(c.m), c.ldo));
    it = fp8_plans_.emplace(key, std::move(plan)).first;
  }
  Plan* plan = it->second.get();
  if (plan == nullptr) return refused();
  // This call's scale pointers; on a new plan before the heuristic, which checks them too.
  RETURN_IF_LT_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &c.w_scales, sizeof(c.w_scales)));
  RETURN_IF_LT_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &c.x_scales, sizeof(c.x_scales)));
  if (fresh) {
    // autotune: the top candidates timed on this call's buffers, outside a graph capture.
    ASSIGN_OR_RETURN(const bool capturing, Capturing(stream));
    const bool time = options_.autotune && !capturing;
    const auto candidates = Candidates(*plan, c.w, c.x, c.out, /*no_split_k=*/false,
                                       time ? kAutotuneCandidates : 1);
    if (!candidates.ok() || candidates->empty()) {
      it->second.reset();  // remembered as refused
      return refused();
    }
    int best = 0;
    if (time) {
      const absl::StatusOr<int> fastest =
          FastestOf(*plan, *candidates, c.w, c.x, c.out, stream,
                    absl::StrCat("W8A8 m=", c.m, " n=", c.n, " k=", c.k));
      if (!fastest.ok() || *fastest < 0) {  // none ran: refused, as a failed launch below is
        it->second.reset();
        return fastest.ok() ? refused() : fastest.status();
      }
      best = *fastest;
    }
    plan->algo = (*candidates)[static_cast<size_t>(best)].algo;
  }
  if (const cublasStatus_t st = Launch(*plan, plan->algo, c.w, c.x, c.out, stream);
      st != CUBLAS_STATUS_SUCCESS) {
    // Refused at launch (nothing ran): the caller takes another path, now and for this shape.
    it->second.reset();
    return absl::UnimplementedError(absl::StrCat("MatmulFp8: cuBLASLt FP8 GEMM failed to launch (",
                                                 cublasLtGetStatusName(st), ") for m=", c.m,
                                                 " n=", c.n, " k=", c.k));
  }
  return absl::OkStatus();
}

bool GemmRunner::Fp8Refused(const Fp8GemmCall& c) const {
  const auto it =
      fp8_plans_.find(Fp8Key{c.m, c.n, c.k, c.ldo, Alignment(c.out), c.w_row_scales, c.out_f32});
  return it != fp8_plans_.end() && it->second == nullptr;
}

}  // namespace xserv::kernels::cuda
