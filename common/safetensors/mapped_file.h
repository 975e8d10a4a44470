// Read-only memory mapping of a whole file (RAII).
//
// Move-only; the owner unmaps on destruction. The bytes are immutable, so any number of threads
// may read them concurrently. If another process truncates the file while it is mapped, reads of
// the lost pages raise SIGBUS: checkpoints must not be rewritten in place while served.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace xserv::safetensors {

class MappedFile {
 public:
  // Maps `path` read-only and shared (pages come from the page cache, so several worker
  // processes of one host share one copy). A zero-length file maps to an empty span.
  static absl::StatusOr<MappedFile> Open(const std::string& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {data_, size_}; }

  // Hints the kernel to read `range` (a sub-span of bytes()) ahead, e.g. before uploading a
  // shard's weights; harmless to skip.
  void AdviseWillNeed(std::span<const std::byte> range) const;

 private:
  MappedFile(const std::byte* data, size_t size) : data_(data), size_(size) {}
  void Reset();

  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace xserv::safetensors
