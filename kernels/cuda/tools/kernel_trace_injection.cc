// A CUPTI injection library that records every kernel a process runs — graph nodes included —
// with its GPU start and end, and writes them at exit as CSV in nsys's cuda_gpu_trace columns
// ("Start (ns)","Duration (ns)","Name", plus "End (ns)", the graph node and the launch shape),
// so scripts/gpu/timeline_summary.py reads it as it reads nsys. The GPU host has no nsys, and
// ncu replays each kernel alone; this gives the real timeline of a graphed decode step: the
// overlap PDL buys and the idle gaps between kernels.
//
// Use: CUDA_INJECTION64_PATH=.../libxserv_kernel_trace.so XSERV_KERNEL_TRACE=out.csv PROGRAM...
// The CUDA driver loads the library at the process's first CUDA call and calls
// InitializeInjection. CUPTI's kernel records (CONCURRENT_KERNEL: kernels still run concurrently)
// are buffered by CUPTI and handed back in BufferCompleted; the file is written by an atexit
// handler after a forced flush. A diagnostic tool: it reports its own failures on stderr and
// never stops the traced program.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct KernelRecord {
  uint64_t start, end;
  std::string name;
  uint64_t graph_node;
  uint32_t graph, stream;
  int32_t grid[3], block[3];
  uint16_t registers;
};

constexpr size_t kBufferBytes = 8 << 20;
constexpr size_t kBufferAlign = 8;  // CUPTI's ACTIVITY_RECORD_ALIGNMENT

std::mutex mu;
std::vector<KernelRecord>* records = nullptr;  // leaked on purpose: read by the atexit handler

std::string Demangled(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                           std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<KernelRecord> batch;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        record->kind != CUPTI_ACTIVITY_KIND_KERNEL) {
      continue;
    }
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    batch.push_back({.start = k->start,
                     .end = k->end,
                     .name = Demangled(k->name),
                     .graph_node = k->graphNodeId,
                     .graph = k->graphId,
                     .stream = k->streamId,
                     .grid = {k->gridX, k->gridY, k->gridZ},
                     .block = {k->blockX, k->blockY, k->blockZ},
                     .registers = k->registersPerThread});
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(mu);
  records->insert(records->end(), std::make_move_iterator(batch.begin()),
                  std::make_move_iterator(batch.end()));
}

std::string CsvQuoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void WriteTrace() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const char* env = std::getenv("XSERV_KERNEL_TRACE");
  const std::string path = env != nullptr && *env != '\0' ? env : "kernel-trace.csv";
  std::lock_guard<std::mutex> lock(mu);
  std::sort(records->begin(), records->end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.start < b.start; });
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "kernel trace: cannot write %s\n", path.c_str());
    return;
  }
  std::fprintf(f,
               "\"Start (ns)\",\"Duration (ns)\",\"End (ns)\",\"Graph\",\"Graph node\","
               "\"Stream\",\"Grid\",\"Block\",\"Registers\",\"Name\"\n");
  for (const KernelRecord& r : *records) {
    std::fprintf(f, "%llu,%llu,%llu,%u,%llu,%u,\"%d,%d,%d\",\"%d,%d,%d\",%u,%s\n",
                 static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end - r.start),
                 static_cast<unsigned long long>(r.end), r.graph,
                 static_cast<unsigned long long>(r.graph_node), r.stream, r.grid[0], r.grid[1],
                 r.grid[2], r.block[0], r.block[1], r.block[2], r.registers,
                 CsvQuoted(r.name).c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel trace: %zu kernels to %s\n", records->size(), path.c_str());
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  records = new std::vector<KernelRecord>();
  if (cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel trace: CUPTI refused kernel activity; no trace\n");
    return 0;
  }
  std::atexit(WriteTrace);
  return 1;
}
