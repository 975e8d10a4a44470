// WeightLoader: takes tensors by name from a checkpoint directory, checks their shapes, converts
// them to the backend's compute dtype and uploads them, and at the end reports every missing and
// every unused tensor at once (so a wrong checkpoint fails with one complete message).
//
// Used only during model loading, on one thread. The checkpoint stays mapped while it lives.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/safetensors/safetensors_model.h"
#include "kernels/backend.h"

namespace xserv::model {

// The part of a checkpoint tensor one tensor-parallel rank loads: along dimension `dim`, the
// index ranges `ranges` concatenated in order. One range is a plain shard (rows of a
// column-parallel [out, in] weight, columns of a row-parallel one); several cut one rank's q, k
// and v blocks out of a fused projection (GPT-2's c_attn).
struct TensorSlice {
  struct Range {
    int64_t begin = 0;  // inclusive
    int64_t end = 0;    // exclusive
  };
  int dim = 0;
  std::vector<Range> ranges;

  // Indices selected along `dim` (the sliced tensor's size there).
  int64_t extent() const;
  // `shape` with dimension `dim` replaced by extent().
  std::vector<int64_t> Apply(std::vector<int64_t> shape) const;
};

class WeightLoader {
 public:
  static absl::StatusOr<WeightLoader> Open(const std::string& dir, kernels::Backend& backend);

  bool Has(const std::string& name) const { return checkpoint_.Contains(name); }

  // FP8 checkpoints (config.json quantization_config "fp8", e.g. Qwen3-8B-FP8): a 2-D F8_E4M3
  // weight `X` with a sibling `X_scale_inv` [ceil(out/b0), ceil(in/b1)] (F32, BF16 or F16) is
  // dequantised on the host by Take, X[i, j] * scale_inv[i / b0, j / b1], slices included, and
  // then converted to the wanted dtype (exact in f32; one rounding to bf16). `block` is
  // weight_block_size ({b0, b1}); empty means one scale per tensor (scale_inv of shape [1, 1]).
  void set_fp8_block_size(std::vector<int64_t> block) { fp8_block_ = std::move(block); }

  // Quantise-on-load (xserv-worker --quantization fp8): every 2-D linear weight of the decoder
  // layers ("model.layers.*_proj.weight") read by Take goes through FP8 E4M3 with `block` x
  // `block` scales (kernels/fp8.h) and back, so the model computes with exactly the weights an
  // FP8 checkpoint of the same BF16 master would hold. Blocks tile the tensor this rank holds
  // (under TP the same as the checkpoint's when shard edges are multiples of `block`). 0: off.
  void set_quantize_fp8_block(int64_t block) { quantize_fp8_block_ = block; }
  bool quantizes_fp8() const { return quantize_fp8_block_ > 0; }
  int64_t quantize_fp8_block() const { return quantize_fp8_block_; }
  // The same for "lm_head.weight" alone (xserv-worker --fp8-lm-head), with its own block, in a
  // BF16 checkpoint or an FP8 one (whose lm_head stays BF16): through FP8 and back, or kept FP8
  // by TakeFp8 under set_fp8_matmuls. 0: off.
  void set_quantize_lm_head_fp8_block(int64_t block) { lm_head_fp8_block_ = block; }
  int64_t quantize_lm_head_fp8_block() const { return lm_head_fp8_block_; }
  // FP8 linear weights kept as FP8 for Backend::MatmulFp8 (TakeFp8); off: decoded at load.
  void set_fp8_matmuls(bool on) { fp8_matmuls_ = on; }
  bool fp8_matmuls() const { return fp8_matmuls_; }

  // An FP8 linear weight on the host: E4M3 codes [rows, cols] and f32 scales
  // [ceil(rows / block), ceil(cols / block)] (kernels/fp8.h).
  struct Fp8HostWeight {
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    int64_t rows = 0, cols = 0, block = 0;
  };
  // The 2-D weight `name` of `shape` (the rank's `slice` of it when given) as FP8, for
  // Backend::MatmulFp8, when set_fp8_matmuls is on and either it is quantised on load (blocks of
  // the held tensor, as Take's decoded values) or the checkpoint stores it as FP8 with square
  // block scales that `slice` cuts only at block edges (the checkpoint's own codes and scales).
  // Nothing (and nothing read) when none applies: the caller takes it dense. A weight that
  // applies but fails to read comes back with no codes (the problem recorded).
  std::optional<Fp8HostWeight> TakeFp8(const std::string& name, const std::vector<int64_t>& shape,
                                       const TensorSlice* slice);

  // Records a failure of the caller's own upload of `name` (reported by Finish).
  void RecordFailure(const std::string& name, const absl::Status& status);
  // The same for host floats the caller loads itself (gpt-oss experts): `matrices` [rows, cols].
  void QuantizeFp8InPlace(std::span<float> values, int64_t matrices, int64_t rows, int64_t cols);

  // The tensor `name` with exactly `shape`, converted to `dtype` (default: the backend's compute
  // dtype) on the device. A missing tensor or a wrong shape is recorded (see Finish) and an empty
  // Buffer is returned so loading can go on and report everything at once.
  kernels::Buffer Take(const std::string& name, std::vector<int64_t> shape);
  kernels::Buffer Take(const std::string& name, std::vector<int64_t> shape, kernels::DType dtype);
  // A [rows, cols] checkpoint tensor stored transposed ([cols, rows], e.g. GPT-2's Conv1D).
  kernels::Buffer TakeTransposed(const std::string& name, int64_t rows, int64_t cols);
  // Raw host bytes of a tensor (for formats decoded on the host, e.g. MXFP4 blocks), with the
  // same shape check. Empty on error (recorded).
  std::vector<uint8_t> TakeBytes(const std::string& name, std::vector<int64_t> shape,
                                 kernels::DType dtype);
  // The tensor's values as host floats (for layouts rearranged on the host before upload), with
  // the same shape check; false when missing or misshapen (recorded).
  bool ReadHostFloats(const std::string& name, const std::vector<int64_t>& shape,
                      std::vector<float>& out);
  // Uploads host bytes produced by the caller (e.g. FP8 codes) into a new u8 tensor.
  kernels::Buffer UploadBytes(std::span<const uint8_t> bytes, std::vector<int64_t> shape);
  // Uploads host floats produced by the caller into a new tensor of the compute dtype (or `dtype`).
  kernels::Buffer Upload(std::span<const float> values, std::vector<int64_t> shape);
  kernels::Buffer Upload(std::span<const float> values, std::vector<int64_t> shape,
                         kernels::DType dtype);

  // Sliced variants: `shape` is the whole checkpoint tensor's shape (checked as above); the
  // result holds only `slice`, and only its bytes are read and counted in bytes_loaded().
  kernels::Buffer Take(const std::string& name, const std::vector<int64_t>& shape,
                       const TensorSlice& slice);
  kernels::Buffer Take(const std::string& name, const std::vector<int64_t>& shape,
                       const TensorSlice& slice, kernels::DType dtype);
  // `slice` refers to the transposed [rows, cols] result, not to the stored [cols, rows] layout.
  kernels::Buffer TakeTransposed(const std::string& name, int64_t rows, int64_t cols,
                                 const TensorSlice& slice);
  std::vector<uint8_t> TakeBytes(const std::string& name, const std::vector<int64_t>& shape,
                                 kernels::DType dtype, const TensorSlice& slice);
  bool ReadHostFloats(const std::string& name, const std::vector<int64_t>& shape,
                      const TensorSlice& slice, std::vector<float>& out);

  // Marks a tensor as deliberately unused (e.g. lm_head.weight of a tied model).
  void Ignore(const std::string& name);
  // Marks every tensor whose name starts with `prefix` as deliberately unused: a pipeline stage's
  // view of the other stages' layers ("model.layers.7."; end with "." so 7 does not cover 70).
  void IgnorePrefix(const std::string& prefix);

  // OK when every Take found its tensor and every tensor was taken or ignored; otherwise one
  // error naming the directory and listing the missing, misshapen and unexpected tensors.
  absl::Status Finish() const;

  uint64_t bytes_loaded() const { return bytes_loaded_; }
  uint64_t checkpoint_bytes() const { return checkpoint_.TotalBytes(); }
  // Called with (bytes_loaded, checkpoint_bytes) each time a tensor (or slice) has been read, for
  // start-up progress reports. A tensor-parallel rank reads only its share of the checkpoint.
  void set_progress(std::function<void(uint64_t, uint64_t)> progress) {
    progress_ = std::move(progress);
  }

 private:
  WeightLoader(std::string dir, safetensors::SafetensorsModel checkpoint, kernels::Backend& backend)
      : dir_(std::move(dir)), checkpoint_(std::move(checkpoint)), backend_(&backend) {}

  // The tensor `name` if present with `shape` (marked used, bytes counted unless `count` is
  // false); records problems.
  std::optional<safetensors::TensorView> Lookup(const std::string& name,
                                                const std::vector<int64_t>& shape,
                                                bool count = true);
  void Count(uint64_t bytes);
  // A copy of `data` when `actual` is the `wanted` dtype; otherwise empty and a problem recorded.
  std::vector<uint8_t> BytesOfType(const std::string& name, safetensors::DType actual,
                                   kernels::DType wanted, std::span<const std::byte> data);
  // Like Lookup, but copies out only `slice` (its bytes counted, not the whole tensor's).
  struct SlicedBytes {
    safetensors::DType dtype;
    std::vector<int64_t> shape;  // the slice's
    std::vector<std::byte> data;
  };
  std::optional<SlicedBytes> LookupSlice(const std::string& name,
                                         const std::vector<int64_t>& shape,
                                         const TensorSlice& slice);

  // Multiplies `values`, the (sliced, when `slice`) 2-D F8 tensor `name` of `shape`, by its block
  // scales when the checkpoint has `name`_scale_inv. False (recorded) on a bad scale tensor.
  bool ApplyFp8Scales(const std::string& name, const std::vector<int64_t>& shape,
                      const TensorSlice* slice, std::vector<float>& values);
  // `data` (stored as `stored`; the `slice` of `name`'s `shape` when given, held as
  // `held_shape`) as the floats the model computes with: converted, FP8 block scales applied,
  // and through FP8 when quantising on load. False (recorded) on failure.
  bool DecodeWeight(const std::string& name, const std::vector<int64_t>& shape,
                    const TensorSlice* slice, safetensors::DType stored,
                    std::span<const std::byte> data, const std::vector<int64_t>& held_shape,
                    std::vector<float>& host);
  // False (recorded) for a block-scaled F8 tensor read as plain floats (ReadHostFloats).
  bool RefuseScaledFp8(const std::string& name, safetensors::DType dtype);

  std::string dir_;
  std::vector<int64_t> fp8_block_;
  int64_t quantize_fp8_block_ = 0;
  int64_t lm_head_fp8_block_ = 0;
  bool fp8_matmuls_ = false;
  // The block `name` is quantised with on load (quantize_fp8_block_ for the decoder linears,
  // lm_head_fp8_block_ for the lm_head), 0 for none.
  int64_t QuantizeBlockOf(const std::string& name, const std::vector<int64_t>& shape) const;
  bool QuantizesOnLoad(const std::string& name, const std::vector<int64_t>& shape) const {
    return QuantizeBlockOf(name, shape) > 0;
  }
  static void RoundTripFp8(std::span<float> values, int64_t matrices, int64_t rows, int64_t cols,
                           int64_t block);
  safetensors::SafetensorsModel checkpoint_;
  kernels::Backend* backend_;
  std::set<std::string> used_;
  std::vector<std::string> ignored_prefixes_;
  std::vector<std::string> problems_;
  uint64_t bytes_loaded_ = 0;
  std::function<void(uint64_t, uint64_t)> progress_;
};

}  // namespace xserv::model
