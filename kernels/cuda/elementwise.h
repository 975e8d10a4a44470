// Launchers of the element-wise and row-copy kernels (elementwise.cu): Add, SiluMul, GeluTanh,
// bias add, Embedding, GatherRows, Convert. Host API only; the CudaBackend ops validate dtypes and
// shapes first (ops_elementwise.cc), so these trust their arguments. Each returns the launch's
// cudaError_t (cudaGetLastError), never synchronises and never allocates.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/kernel_types.h"

namespace xserv::kernels::cuda {

// bf16 rows, equal shapes: out = a + b. out may alias a or b.
cudaError_t LaunchAdd(const RowsView& a, const RowsView& b, const RowsView& out,
                      cudaStream_t stream);
// bf16 rows: out = silu(gate) * up. out may alias gate or up.
// pdl: launch with programmatic dependent launch (pdl.cuh).
cudaError_t LaunchSiluMul(const RowsView& gate, const RowsView& up, const RowsView& out,
                          cudaStream_t stream, bool pdl = false);
// bf16 rows: out = gelu_tanh(x). out may alias x.
cudaError_t LaunchGeluTanh(const RowsView& x, const RowsView& out, cudaStream_t stream);
// out[r, c] += bias[c]; out f32 or bf16, bias f32 or bf16 (for GEMMs whose epilogue has none).
cudaError_t LaunchAddBias(const RowsView& out, ElemType out_type, const void* bias,
                          ElemType bias_type, cudaStream_t stream);
// out[t] = table[ids[t] - first_id] (or +=). table bf16 [vocab, cols] contiguous; out bf16
// rows. Negative ids poison their row with NaN; so do ids past the table unless `shard`, where
// ids outside [first_id, first_id + vocab) give zero rows (another rank's vocabulary).
cudaError_t LaunchEmbedding(const void* table, int64_t vocab, const int32_t* ids,
                            const RowsView& out, bool accumulate, int64_t first_id, bool shard,
                            cudaStream_t stream);
// out[l] = x[idx[l]] for rows of `elem_bytes`-sized elements (2 or 4). Bad indices poison (NaN).
cudaError_t LaunchGatherRows(const RowsView& x, const int32_t* idx, const RowsView& out,
                             int elem_bytes, cudaStream_t stream);
// n contiguous elements, converted between float types (src_type != dst_type).
cudaError_t LaunchConvert(const void* src, ElemType src_type, void* dst, ElemType dst_type,
                          int64_t n, cudaStream_t stream);
// Reads `bytes` (a multiple of 16, 16-byte aligned) of `data` and discards them (a word may land
// in `sink`): fills L2 with clean lines, evicting what was there without write-backs, so a
// kernel timed next reads its operands from HBM as it would in a model's step (GEMM autotune).
cudaError_t LaunchReadSweep(const void* data, int64_t bytes, uint32_t* sink, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
