#include "worker/model/layers.h"

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/fp8.h"
#include "kernels/rope_table.h"
#include "spdlog/spdlog.h"
#include "worker/parallel/communicator.h"

namespace xserv::model {
namespace {

kernels::RopeSpec RopeSpecFor(const ModelConfig& config) {
  kernels::RopeSpec spec;
  spec.head_dim = static_cast<int>(config.head_dim);
  spec.theta = config.rope.theta;
  const RopeScaling& s = config.rope.scaling;
  spec.factor = s.factor;
  spec.low_freq_factor = s.low_freq_factor;
  spec.high_freq_factor = s.high_freq_factor;
  spec.original_max_position_embeddings = static_cast<int>(s.original_max_position_embeddings);
  spec.beta_fast = s.beta_fast;
  spec.beta_slow = s.beta_slow;
  spec.truncate = s.truncate;
  spec.attention_factor = s.attention_factor.value_or(0.0);
  switch (s.type) {
    case RopeScalingType::kNone: spec.type = kernels::RopeSpec::Type::kDefault; break;
    case RopeScalingType::kLinear: spec.type = kernels::RopeSpec::Type::kLinear; break;
    case RopeScalingType::kLlama3: spec.type = kernels::RopeSpec::Type::kLlama3; break;
    case RopeScalingType::kYarn: spec.type = kernels::RopeSpec::Type::kYarn; break;
  }
  return spec;
}


}  // namespace

absl::Status AllReduceSum(parallel::Communicator* comm, Backend& backend, const Tensor& t) {
  if (comm == nullptr || comm->world_size() == 1) return absl::OkStatus();
  const bool device_tensor = t.device != kernels::DeviceType::kCpu;
  const bool device_comm = comm->memory() == parallel::MemoryKind::kDevice;
  if (!t.is_contiguous() || device_tensor != device_comm ||
      (t.dtype != kernels::DType::kF32 && t.dtype != kernels::DType::kBF16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllReduceSum: needs a contiguous f32/bf16 tensor in the communicator's memory, got ",
        t.Describe(), " on ", backend.name()));
  }
  return comm->AllReduceTyped(t.data, static_cast<size_t>(t.numel()),
                              t.dtype == kernels::DType::kBF16 ? parallel::ElementType::kBF16
                                                               : parallel::ElementType::kF32,
                              parallel::ReduceOp::kSum);
}

Buffer TakeShard(WeightLoader& loader, const TpShard& tp, const std::string& name,
                 const std::vector<int64_t>& shape, const TensorSlice& slice) {
  if (!tp.sharded()) return loader.Take(name, shape);
  return loader.Take(name, shape, slice);
}

namespace {

// Host bytes or floats into a new device tensor of `dtype`; failure recorded in `status`.
template <typename T>
Buffer UploadHost(Backend& backend, kernels::DType dtype, const std::vector<T>& host,
                  std::initializer_list<int64_t> shape, absl::Status& status) {
  auto buffer = backend.Allocate(dtype, shape);
  absl::Status copied = buffer.ok() ? backend.CopyFromHost(host.data(), buffer->view())
                                    : buffer.status();
  if (!copied.ok()) {
    if (status.ok()) status = copied;
    return {};
  }
  return std::move(*buffer);
}

LinearWeight UploadFp8(Backend& backend, const WeightLoader::Fp8HostWeight& w,
                       absl::Status& status) {
  LinearWeight out;
  if (w.codes.empty()) return out;  // the loader recorded why
  const int64_t b = w.block;
  out.codes = UploadHost(backend, kernels::DType::kU8, w.codes, {w.rows, w.cols}, status);
  out.scales = UploadHost(backend, kernels::DType::kF32, w.scales,
                          {(w.rows + b - 1) / b, (w.cols + b - 1) / b}, status);
  out.block = b;
  if (backend.WantsFp8RowScales()) {
    out.row_scales = UploadHost(backend, kernels::DType::kF32,
                                kernels::Fp8RowScales(w.scales, w.rows, w.cols, b),
                                {(w.cols + b - 1) / b, w.rows}, status);
  }
  return out;
}

}  // namespace

// Backend::PrefetchAfterNextMatmul of `w` (dense, or its FP8 codes); nothing for null.
void PrefetchAfterNextMatmul(Backend& backend, const LinearWeight* w) {
  if (w == nullptr || w->empty()) return;
  backend.PrefetchAfterNextMatmul(w->codes.empty() ? w->dense.view() : w->codes.view());
}

absl::Status RunLinear(Backend& backend, const Tensor& x, const LinearWeight& w, const Tensor* bias,
                       const Tensor& out) {
  if (w.codes.empty()) return backend.Matmul(x, w.dense.view(), bias, out);
  return backend.MatmulFp8(x, w.fp8(), bias, out);
}

absl::Status RunNormLinear(Backend& backend, const kernels::PreNorm* norm, const Tensor& x,
                           const LinearWeight& w, const Tensor* bias, const Tensor& out) {
  if (norm == nullptr) return RunLinear(backend, x, w, bias, out);
  if (w.codes.empty()) {
    const Tensor dense = w.dense.view();
    return backend.AddRmsNormMatmul(*norm, kernels::MatmulWeight{.dense = &dense}, bias, out);
  }
  const kernels::Fp8Weight fp8 = w.fp8();
  return backend.AddRmsNormMatmul(*norm, kernels::MatmulWeight{.fp8 = &fp8}, bias, out);
}

namespace {

// The linear weight `name` of `shape`, its `held` part (null: whole): FP8 when `fp8` and the
// loader keeps it so (WeightLoader::TakeFp8), else dense (FP8-rounded where quantised on load).
LinearWeight TakeHeldLinear(WeightLoader& loader, Backend& backend, const std::string& name,
                            const std::vector<int64_t>& shape, const TensorSlice* held,
                            bool fp8 = true) {
  std::optional<WeightLoader::Fp8HostWeight> w;
  if (fp8) w = loader.TakeFp8(name, shape, held);
  if (w) {
    absl::Status status;
    LinearWeight out = UploadFp8(backend, *w, status);
    if (!status.ok()) loader.RecordFailure(name, status);  // Finish reports it
    return out;
  }
  return LinearWeight{.dense = held == nullptr ? loader.Take(name, shape)
                                               : loader.Take(name, shape, *held)};
}

}  // namespace

LinearWeight TakeLinear(WeightLoader& loader, Backend& backend, const TpShard& tp,
                        const std::string& name, const std::vector<int64_t>& shape,
                        const TensorSlice& slice) {
  return TakeHeldLinear(loader, backend, name, shape, tp.sharded() ? &slice : nullptr);
}

Buffer TakeRowParallelBias(WeightLoader& loader, const TpShard& tp, const std::string& name,
                           int64_t size) {
  if (tp.rank != 0 && loader.Has(name)) {  // a missing bias is still reported, by every rank
    loader.Ignore(name);
    return {};
  }
  return loader.Take(name, {size});
}

Buffer AllocRows(Backend& backend, int64_t rows, int64_t cols, absl::Status& status) {
  auto buffer = backend.Allocate(backend.compute_dtype(), {rows, cols});
  if (!buffer.ok()) {
    if (status.ok()) status = buffer.status();
    return {};
  }
  return std::move(*buffer);
}

absl::StatusOr<Buffer> LoadRopeTable(const ModelConfig& config, int64_t positions,
                                     Backend& backend) {
  // A config may allow far more positions than serving needs (10M-token contexts): say how to
  // limit them rather than fail on a huge allocation.
  const double bytes = static_cast<double>(positions) * static_cast<double>(config.head_dim) * 4;
  if (positions > std::numeric_limits<int32_t>::max() || bytes > double(int64_t{4} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a RoPE table for ", positions, " positions would take ", std::ceil(bytes / (1 << 20)),
        " MiB: limit the context with xserv-worker --max-model-len"));
  }
  const int max_positions = static_cast<int>(positions);
  ASSIGN_OR_RETURN(std::vector<float> table,
                   kernels::BuildRopeTable(RopeSpecFor(config), max_positions));
  ASSIGN_OR_RETURN(Buffer buffer,
                   backend.Allocate(kernels::DType::kF32, {max_positions, config.head_dim}));
  RETURN_IF_ERROR(backend.CopyFromHost(table.data(), buffer.view()));
  return buffer;
}

namespace {

// Rows of `parts` one after the other in a new buffer of `dtype` (a device copy or conversion
// each); empty, with the failure recorded in `status`, when any part is missing or the
// allocation fails.
Buffer StackRows(Backend& backend, kernels::DType dtype, std::initializer_list<const Buffer*> parts,
                 absl::Status& status) {
  int64_t rows = 0;
  for (const Buffer* part : parts) {
    if (part->empty()) return {};
    rows += part->view().dim(0);
  }
  const Tensor& first = (*parts.begin())->view();
  std::vector<int64_t> shape(first.shape.begin(), first.shape.begin() + first.rank);
  shape[0] = rows;
  auto stacked = backend.Allocate(dtype, shape);
  if (!stacked.ok()) {
    status = stacked.status();
    return {};
  }
  int64_t row = 0;
  for (const Buffer* part : parts) {
    const int64_t n = part->view().dim(0);
    status = backend.Convert(part->view(), stacked->view().SliceRows(row, row + n));
    if (!status.ok()) return {};
    row += n;
  }
  return std::move(*stacked);
}

// FP8 host weights as one, their rows one after the other, when their blocks agree and every
// part but the last ends on a block edge (codes and scales then stack row-wise); nothing, and
// the parts untouched, otherwise.
std::optional<WeightLoader::Fp8HostWeight> StackFp8Rows(
    std::initializer_list<WeightLoader::Fp8HostWeight*> parts) {
  const WeightLoader::Fp8HostWeight& first = **parts.begin();
  for (const WeightLoader::Fp8HostWeight* part : parts) {
    const bool last = part == *(parts.end() - 1);
    if (part->block != first.block || (!last && part->rows % part->block != 0)) {
      return std::nullopt;
    }
  }
  WeightLoader::Fp8HostWeight all = std::move(**parts.begin());
  for (auto it = parts.begin() + 1; it != parts.end(); ++it) {
    all.codes.insert(all.codes.end(), (*it)->codes.begin(), (*it)->codes.end());
    all.scales.insert(all.scales.end(), (*it)->scales.begin(), (*it)->scales.end());
    all.rows += (*it)->rows;
  }
  return all;
}

// One [q + 2 kv, H] projection from the loaded dense q, k, v, and their biases; when FP8 q, k, v
// were stacked already (TakeFp8Qkv), their biases only.
void StackQkv(Backend& backend, WeightLoader& loader, const std::string& prefix,
              AttentionWeights& w) {
  const bool fp8 = !w.qkv.empty();
  if (!fp8 && (w.q.dense.empty() || w.k.dense.empty() || w.v.dense.empty())) return;
  const int biases = !w.q_bias.empty() + !w.k_bias.empty() + !w.v_bias.empty();
  if (biases != 0 && biases != 3) {  // a partial set stays apart, which stacked FP8 cannot
    if (fp8) {
      loader.RecordFailure(prefix + "qkv bias", absl::DataLossError("a partial q, k, v set"));
    }
    return;
  }
  absl::Status status;
  Buffer qkv = fp8 ? Buffer{}
                   : StackRows(backend, w.q.dense.view().dtype,
                               {&w.q.dense, &w.k.dense, &w.v.dense}, status);
  Buffer bias = biases == 3 ? StackRows(backend, w.q_bias.view().dtype,
                                        {&w.q_bias, &w.k_bias, &w.v_bias}, status)
                            : Buffer{};
  if (!status.ok()) {
    loader.RecordFailure(prefix + "qkv (stacked)", status);  // Finish reports it
    return;
  }
  if (!fp8) w.qkv.dense = std::move(qkv);
  w.qkv_bias = std::move(bias);
  w.q = {}, w.k = {}, w.v = {};
  w.q_bias = {}, w.k_bias = {}, w.v_bias = {};
}

// FP8 q, k and v as one FP8 [q + 2 kv, H] projection, as FP8 gate_up stacks (their codes and
// scales stack row-wise when q's and k's rows end on a block edge and the blocks agree): at
// batch 1 one GEMV instead of three, and the fused q/k norm then takes the strided slices.
// Otherwise the FP8 ones are uploaded one by one into w. Returns which of q, k, v (bits 0, 1, 2)
// it took from the loader, read or failed (the loader records a failed read): the caller takes
// the others.
int TakeFp8Qkv(WeightLoader& loader, Backend& backend, const TpShard& tp, const std::string& p,
               const std::vector<int64_t>& q_shape, const std::vector<int64_t>& kv_shape,
               const TensorSlice& q_rows, const TensorSlice& kv_rows, AttentionWeights& w) {
  const bool held = tp.sharded();
  std::optional<WeightLoader::Fp8HostWeight> q =
      loader.TakeFp8(p + "q_proj.weight", q_shape, held ? &q_rows : nullptr);
  if (!q) return 0;
  std::optional<WeightLoader::Fp8HostWeight> k =
      loader.TakeFp8(p + "k_proj.weight", kv_shape, held ? &kv_rows : nullptr);
  std::optional<WeightLoader::Fp8HostWeight> v =
      k ? loader.TakeFp8(p + "v_proj.weight", kv_shape, held ? &kv_rows : nullptr) : std::nullopt;
  const int taken = 1 | (k ? 2 : 0) | (v ? 4 : 0);
  absl::Status status;
  const bool read = !q->codes.empty() && (!k || !k->codes.empty()) && (!v || !v->codes.empty());
  if (read && k && v) {
    if (std::optional<WeightLoader::Fp8HostWeight> all = StackFp8Rows({&*q, &*k, &*v})) {
      w.qkv = UploadFp8(backend, *all, status);
      if (!status.ok()) loader.RecordFailure(p + "qkv (stacked FP8)", status);
      return taken;
    }
  }
  const auto upload = [&](const std::optional<WeightLoader::Fp8HostWeight>& fp8,
                          const char* name, LinearWeight& out) {
    if (!fp8 || fp8->codes.empty()) return;  // not FP8, or its failed read already recorded
    out = UploadFp8(backend, *fp8, status);
    if (!status.ok()) loader.RecordFailure(p + name, status);
  };
  upload(q, "q_proj.weight", w.q);
  upload(k, "k_proj.weight", w.k);
  upload(v, "v_proj.weight", w.v);
  return taken;
}

}  // namespace

AttentionWeights AttentionWeights::Load(WeightLoader& loader, Backend& backend,
                                        const ModelConfig& c, const TpShard& tp,
                                        const std::string& prefix) {
  const std::string p = prefix + "self_attn.";
  const int64_t q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  const int64_t kv_begin = tp.KvHeadBegin(c), kv_end = kv_begin + tp.KvHeadsPerRank(c);
  const TensorSlice q_rows = tp.Split(0, q_dim);
  const TensorSlice kv_rows = TpShard::Blocks(0, kv_begin, kv_end, c.head_dim);
  AttentionWeights w;
  const bool stack = backend.TakesStridedQkNormRope(c.head_dim);
  const int taken = stack ? TakeFp8Qkv(loader, backend, tp, p, {q_dim, c.hidden_size},
                                       {kv_dim, c.hidden_size}, q_rows, kv_rows, w)
                          : 0;
  if ((taken & 1) == 0) {
    w.q = TakeLinear(loader, backend, tp, p + "q_proj.weight", {q_dim, c.hidden_size}, q_rows);
  }
  if ((taken & 2) == 0) {
    w.k = TakeLinear(loader, backend, tp, p + "k_proj.weight", {kv_dim, c.hidden_size}, kv_rows);
  }
  if ((taken & 4) == 0) {
    w.v = TakeLinear(loader, backend, tp, p + "v_proj.weight", {kv_dim, c.hidden_size}, kv_rows);
  }
  w.o = TakeLinear(loader, backend, tp, p + "o_proj.weight", {c.hidden_size, q_dim},
                   tp.Split(1, q_dim));
  if (c.qkv_bias) {
    w.q_bias = TakeShard(loader, tp, p + "q_proj.bias", {q_dim}, q_rows);
    w.k_bias = TakeShard(loader, tp, p + "k_proj.bias", {kv_dim}, kv_rows);
    w.v_bias = TakeShard(loader, tp, p + "v_proj.bias", {kv_dim}, kv_rows);
  }
  if (c.o_proj_bias) w.o_bias = TakeRowParallelBias(loader, tp, p + "o_proj.bias", c.hidden_size);
  if (stack) StackQkv(backend, loader, p, w);
  if (c.qk_norm) {
    w.q_norm = loader.Take(p + "q_norm.weight", {c.head_dim});
    w.k_norm = loader.Take(p + "k_norm.weight", {c.head_dim});
  }
  if (c.architecture == Architecture::kGptOss) {  // softmax-side logits stay f32 on every backend
    const std::string name = p + "sinks";
    w.sinks = tp.sharded()
                  ? loader.Take(name, {c.num_heads}, tp.Split(0, c.num_heads), kernels::DType::kF32)
                  : loader.Take(name, {c.num_heads}, kernels::DType::kF32);
  }
  return w;
}

namespace {

// An MLP's down projection [H, I] (the rank's columns of it): TakeLinear's, and, FP8 where the
// backend wants it, transposed into `down_t` as well.
LinearWeight TakeDown(WeightLoader& loader, Backend& backend, const TpShard& tp,
                      const std::string& name, const ModelConfig& c, LinearWeight& down_t) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  const TensorSlice cols = tp.Split(1, inter);
  std::optional<WeightLoader::Fp8HostWeight> fp8 =
      loader.TakeFp8(name, {h, inter}, tp.sharded() ? &cols : nullptr);
  if (!fp8) return TakeLinear(loader, backend, tp, name, {h, inter}, cols);
  absl::Status status;
  LinearWeight down = UploadFp8(backend, *fp8, status);
  if (!fp8->codes.empty() && status.ok() &&
      backend.WantsFp8DownTransposed(fp8->rows, fp8->cols, fp8->block)) {
    kernels::Fp8Blocks t =
        kernels::TransposeFp8Blocks(fp8->codes, fp8->scales, fp8->rows, fp8->cols, fp8->block);
    down_t = UploadFp8(backend,
                       {.codes = std::move(t.codes), .scales = std::move(t.scale_inv),
                        .rows = fp8->cols, .cols = fp8->rows, .block = fp8->block},
                       status);
  }
  if (!status.ok()) loader.RecordFailure(name, status);  // Finish reports it
  return down;
}

}  // namespace

GatedMlpWeights GatedMlpWeights::Load(WeightLoader& loader, Backend& backend,
                                      const ModelConfig& c, const TpShard& tp,
                                      const std::string& prefix, absl::Status& status) {
  const std::string p = prefix + "mlp.";
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  GatedMlpWeights w;
  const TensorSlice rows = tp.Split(0, inter);
  const TensorSlice* held = tp.sharded() ? &rows : nullptr;
  w.down = TakeDown(loader, backend, tp, p + "down_proj.weight", c, w.down_t);
  // FP8 gate and up stack into one FP8 gate_up when their rows end on a block edge (codes and
  // scales then stack row-wise); otherwise both are taken dense below.
  std::optional<WeightLoader::Fp8HostWeight> gate = loader.TakeFp8(p + "gate_proj.weight",
                                                                   {inter, h}, held);
  std::optional<WeightLoader::Fp8HostWeight> up;
  if (gate) up = loader.TakeFp8(p + "up_proj.weight", {inter, h}, held);
  if ((gate && gate->codes.empty()) || (up && up->codes.empty())) {
    return w;  // a read failed: the loader recorded why
  }
  if (gate && up) {
    if (std::optional<WeightLoader::Fp8HostWeight> both = StackFp8Rows({&*gate, &*up})) {
      w.gate_up = UploadFp8(backend, *both, status);
      return w;
    }
  }
  // Dense: gate and up decoded (the FP8 ones, if any, exactly as Take would have), stacked.
  auto dense_of = [&](const std::string& name,
                      const std::optional<WeightLoader::Fp8HostWeight>& fp8) -> Buffer {
    if (!fp8) return TakeShard(loader, tp, name, {inter, h}, rows);
    kernels::Fp8Blocks blocks{.codes = fp8->codes, .scale_inv = fp8->scales};
    std::vector<float> values(static_cast<size_t>(fp8->rows * fp8->cols));
    kernels::DequantizeFp8Blocks(blocks, fp8->rows, fp8->cols, fp8->block, values);
    return loader.Upload(values, {fp8->rows, fp8->cols});
  };
  const Buffer g = dense_of(p + "gate_proj.weight", gate);
  const Buffer u = dense_of(p + "up_proj.weight", up);
  if (g.empty() || u.empty()) return w;  // the loader reports what is missing
  w.gate_up.dense = StackRows(backend, backend.compute_dtype(), {&g, &u}, status);
  return w;
}

absl::StatusOr<Workspace> Workspace::Allocate(Backend& backend, const ModelConfig& c,
                                              int64_t max_tokens, int64_t mlp_width,
                                              bool residual_spare) {
  absl::Status status;
  Workspace ws;
  const int64_t q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  ws.normed = AllocRows(backend, max_tokens, c.hidden_size, status);
  ws.residual = AllocRows(backend, max_tokens, c.hidden_size, status);
  if (residual_spare && backend.FusesNormIntoMatmul()) {
    ws.residual_spare = AllocRows(backend, max_tokens, c.hidden_size, status);
  }
  ws.qkv = AllocRows(backend, max_tokens, q_dim + 2 * kv_dim, status);
  ws.attn = AllocRows(backend, max_tokens, q_dim, status);
  ws.block_out = AllocRows(backend, max_tokens, c.hidden_size, status);
  ws.gate_up = AllocRows(backend, max_tokens, 2 * mlp_width, status);
  ws.gathered = AllocRows(backend, max_tokens, c.hidden_size, status);
  RETURN_IF_ERROR(status);
  return ws;
}

absl::Status RunAttention(Backend& backend, const ModelConfig& c, const AttentionWeights& w,
                          const Tensor& normed, const Tensor* rope_table, int64_t layer,
                          const ForwardInputs& in, const kernels::KvLayer& kv, Workspace& ws,
                          int64_t tokens, const kernels::PreNorm* norm,
                          const LinearWeight* after_o) {
  const int64_t q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  const bool stacked = !w.qkv.empty();
  const Workspace::QkvViews views = ws.Qkv(tokens, q_dim, kv_dim, stacked);
  if (stacked) {
    PrefetchAfterNextMatmul(backend, &w.o);
    RETURN_IF_ERROR(RunNormLinear(backend, norm, normed, w.qkv, OrNull(w.qkv_bias), views.all));
  } else {
    RETURN_IF_ERROR(RunNormLinear(backend, norm, normed, w.q, OrNull(w.q_bias), views.q));
    RETURN_IF_ERROR(RunLinear(backend, normed, w.k, OrNull(w.k_bias), views.k));
    PrefetchAfterNextMatmul(backend, &w.o);
    RETURN_IF_ERROR(RunLinear(backend, normed, w.v, OrNull(w.v_bias), views.v));
  }
  const Tensor q_heads = views.q.UnflattenLast(c.num_heads, c.head_dim);
  const Tensor k_heads = views.k.UnflattenLast(c.num_kv_heads, c.head_dim);
  const Tensor v_heads = views.v.UnflattenLast(c.num_kv_heads, c.head_dim);
  const Tensor q_norm = w.q_norm.view(), k_norm = w.k_norm.view();
  kernels::QkNormRope qk{.eps = static_cast<float>(c.norm_eps)};
  if (!w.q_norm.empty()) qk.q_norm = &q_norm, qk.k_norm = &k_norm;
  if (rope_table != nullptr) qk.positions = &in.positions, qk.cos_sin = rope_table;
  kernels::AttentionParams params;
  params.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  params.sliding_window = static_cast<int>(c.SlidingWindowForLayer(layer));
  params.sinks = OrNull(w.sinks);
  // Sliding-window layers keep their KV in the window tables when the step has them.
  const kernels::AttentionBatch& batch =
      params.sliding_window > 0 && in.has_window_attention ? in.window_attention : in.attention;
  RETURN_IF_ERROR(
      backend.QkNormRopeWriteKv(q_heads, k_heads, v_heads, qk, kv, batch.slot_mapping));
  const Tensor attn = ws.attn.view().SliceRows(0, tokens);
  RETURN_IF_ERROR(backend.Attention(q_heads, kv, batch, params,
                                    attn.UnflattenLast(c.num_heads, c.head_dim)));
  PrefetchAfterNextMatmul(backend, after_o);
  return RunLinear(backend, attn, w.o, OrNull(w.o_bias),
                        ws.block_out.view().SliceRows(0, tokens));
}

Workspace::QkvViews Workspace::Qkv(int64_t tokens, int64_t q_dim, int64_t kv_dim,
                                   bool stacked) const {
  const Tensor& storage = qkv.view();
  QkvViews v;
  if (stacked) {
    v.all = kernels::MakeTensor(storage.data, storage.dtype, storage.device,
                                {tokens, q_dim + 2 * kv_dim});
    v.q = v.all.SliceLast(0, q_dim);
    v.k = v.all.SliceLast(q_dim, q_dim + kv_dim);
    v.v = v.all.SliceLast(q_dim + kv_dim, q_dim + 2 * kv_dim);
    return v;
  }
  const size_t elem = kernels::DTypeSize(storage.dtype);
  char* base = static_cast<char*>(storage.data);
  v.q = kernels::MakeTensor(base, storage.dtype, storage.device, {tokens, q_dim});
  v.k = kernels::MakeTensor(base + tokens * q_dim * elem, storage.dtype, storage.device,
                            {tokens, kv_dim});
  v.v = kernels::MakeTensor(base + tokens * (q_dim + kv_dim) * elem, storage.dtype,
                            storage.device, {tokens, kv_dim});
  return v;
}

Tensor Workspace::MlpRows(int64_t tokens, int64_t width) const {
  const Tensor& all = gate_up.view();
  return kernels::MakeTensor(all.data, all.dtype, all.device, {tokens, width});
}

absl::Status RunGatedMlp(Backend& backend, const GatedMlpWeights& w, const Tensor& normed,
                         Workspace& ws, int64_t tokens, const kernels::PreNorm* norm,
                         const LinearWeight* after_down) {
  const Tensor gate_up = ws.gate_up.view().SliceRows(0, tokens);
  const int64_t inter = w.gate_up.rows() / 2;
  // gate and up are the halves of each row; silu(gate) * up overwrites the gate half (for bf16
  // weights in one op, which a backend may fuse: Backend::MatmulSiluMul, unless the pre-norm is
  // fused into the projection instead).
  const Tensor gate = gate_up.SliceLast(0, inter);
  const Tensor out = ws.block_out.view().SliceRows(0, tokens);
  if (tokens == 1 && !w.down_t.empty() && !w.gate_up.codes.empty()) {  // one op, if it can
    const absl::Status fused =
        backend.GatedMlpRowFp8(norm, normed, w.gate_up.fp8(), w.down_t.fp8(), out);
    if (!absl::IsUnimplemented(fused)) return fused;
  }
  PrefetchAfterNextMatmul(backend, &w.down);
  const Tensor up = gate_up.SliceLast(inter, 2 * inter);
  bool act_done = false;
  if (w.gate_up.codes.empty() && norm == nullptr) {
    RETURN_IF_ERROR(backend.MatmulSiluMul(normed, w.gate_up.dense.view(), gate_up, gate));
    act_done = true;
  } else {
    RETURN_IF_ERROR(RunNormLinear(backend, norm, normed, w.gate_up, nullptr, gate_up));
  }
  PrefetchAfterNextMatmul(backend, after_down);
  if (!act_done && !w.down.codes.empty()) {  // SiluMul and the FP8 down as one op
    return backend.SiluMulMatmulFp8(gate, up, gate, w.down.fp8(), out);
  }
  if (!act_done) RETURN_IF_ERROR(backend.SiluMul(gate, up, gate));
  return RunLinear(backend, gate, w.down, nullptr, out);
}

VocabShard VocabShard::Of(const ModelConfig& config, const TpShard& tp) {
  const int64_t vocab = config.vocab_size;
  if (!tp.sharded() || vocab % tp.size != 0) return VocabShard{0, vocab};
  return VocabShard{tp.rank * vocab / tp.size, (tp.rank + 1) * vocab / tp.size};
}

LinearWeight TakeLmHead(WeightLoader& loader, Backend& backend, const VocabShard& shard,
                        const std::string& name, const ModelConfig& config) {
  const std::vector<int64_t> shape = {config.vocab_size, config.hidden_size};
  const TensorSlice rows = TpShard::Blocks(0, shard.begin, shard.end, 1);
  const TensorSlice* held = shard.Covers(config.vocab_size) ? nullptr : &rows;
  const std::vector<int64_t> held_shape = held == nullptr ? shape : held->Apply(shape);
  const int64_t block = loader.quantize_lm_head_fp8_block();
  const bool keep_fp8 =
      block == 0 || backend.Fp8MatmulAtAnyRows(held_shape[0], held_shape[1], block);
  if (!keep_fp8 && loader.fp8_matmuls()) {
    // Batched steps would decode it on every call: the loader's FP8-rounded values, dense.
    spdlog::warn("--fp8-lm-head: the [{}, {}] lm_head stays in the compute dtype (FP8-rounded) on "
                 "this backend: its FP8 GEMM does not take the shape (needs --fp8-w8a8 and a "
                 "hidden size that is a multiple of 512)",
                 held_shape[0], held_shape[1]);
  }
  return TakeHeldLinear(loader, backend, name, shape, held, keep_fp8);
}

namespace {

// RunLmHead's rows and shards around `matmul` (x, out): the projection itself.
absl::Status LmHeadInto(Backend& backend, const Tensor& final_normed, const VocabShard& shard,
                        parallel::Communicator* comm, const ForwardInputs& in, Workspace& ws,
                        const Tensor& logits,
                        absl::FunctionRef<absl::Status(const Tensor&, const Tensor&)> matmul) {
  const Tensor gathered = ws.gathered.view().SliceRows(0, in.logits_indices.dim(0));
  RETURN_IF_ERROR(backend.GatherRows(final_normed, in.logits_indices, gathered));
  if (shard.Covers(logits.dim(1))) return matmul(gathered, logits);
  // Zero, write this rank's columns, sum: an all-reduce of the whole rows (twice an all-gather's
  // traffic) that needs no transposing copy afterwards.
  RETURN_IF_ERROR(backend.Zero(logits));
  RETURN_IF_ERROR(matmul(gathered, logits.SliceLast(shard.begin, shard.end)));
  return AllReduceSum(comm, backend, logits);
}

}  // namespace

absl::Status RunLmHead(Backend& backend, const Tensor& final_normed, const LinearWeight& lm_head,
                       const VocabShard& shard, parallel::Communicator* comm,
                       const ForwardInputs& in, Workspace& ws, const Tensor& logits) {
  return LmHeadInto(backend, final_normed, shard, comm, in, ws, logits,
                    [&](const Tensor& x, const Tensor& out) {
                      return RunLinear(backend, x, lm_head, nullptr, out);
                    });
}

absl::Status RunLmHead(Backend& backend, const Tensor& final_normed, const Tensor& lm_head,
                       const VocabShard& shard, parallel::Communicator* comm,
                       const ForwardInputs& in, Workspace& ws, const Tensor& logits) {
  return LmHeadInto(
      backend, final_normed, shard, comm, in, ws, logits,
      [&](const Tensor& x, const Tensor& out) { return backend.Matmul(x, lm_head, nullptr, out); });
}

EmbeddingTable EmbeddingTable::Load(WeightLoader& loader, const TpShard& tp,
                                    const VocabShard& shard, const std::string& name,
                                    const ModelConfig& config) {
  EmbeddingTable e;
  e.shard_ = shard;
  const std::vector<int64_t> shape = {config.vocab_size, config.hidden_size};
  if (shard.Covers(config.vocab_size)) {
    e.table_ = loader.Take(name, shape);
    return e;
  }
  e.sharded_ = true;
  e.table_ = TakeShard(loader, tp, name, shape, TpShard::Blocks(0, shard.begin, shard.end, 1));
  return e;  // empty on failure: the loader recorded why
}

absl::Status EmbeddingTable::Run(Backend& backend, parallel::Communicator* comm,
                                 const ForwardInputs& in, const Tensor& out) {
  if (!sharded_) return backend.Embedding(table_.view(), in.token_ids, out, /*accumulate=*/false);
  RETURN_IF_ERROR(backend.EmbeddingShard(table_.view(), in.token_ids, shard_.begin, out));
  return AllReduceSum(comm, backend, out);
}

}  // namespace xserv::model
