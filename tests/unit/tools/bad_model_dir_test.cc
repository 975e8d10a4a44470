// Issue 4's bad model directories: each broken copy of tests/data/models/qwen3-tiny fails
// LoadModel with a message naming the file and/or tensor at fault.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/safetensors/safetensors_file.h"
#include "common/safetensors/writer.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/tools/tools_test_util.h"
#include "worker/model/model.h"

namespace xserv::tools {
namespace {

namespace fs = std::filesystem;
using testing::ReadFileBytes;
using testing::ScratchDir;
using testing::TestModelDir;
using testing::WriteFileBytes;

// A tensor with its bytes copied out of the mapping, so the file can be rewritten.
struct OwnedTensor {
  std::string name;
  safetensors::DType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

class BadModelDirTest : public ::testing::Test {
 protected:
  // The model files only: golden.safetensors is test data, and SafetensorsModel's fallback
  // (every *.safetensors of the directory) would read it as weights once model.safetensors is gone.
  void SetUp() override {
    for (const char* name : {"config.json", "generation_config.json", "model.safetensors"}) {
      fs::copy_file(TestModelDir("qwen3-tiny") + "/" + name, dir_ / name);
    }
  }

  std::string Weights() const { return dir_ / "model.safetensors"; }

  // Rewrites model.safetensors after `edit` changed its tensor list.
  void RewriteWeights(const std::function<void(std::vector<OwnedTensor>&)>& edit) {
    std::vector<OwnedTensor> tensors;
    {
      auto file = safetensors::SafetensorsFile::Open(Weights());
      ASSERT_TRUE(file.ok()) << file.status();
      for (const std::string& name : file->TensorNames()) {
        const auto view = file->Tensor(name);
        tensors.push_back({name, view->dtype, view->shape,
                           std::vector<std::byte>(view->data.begin(), view->data.end())});
      }
    }
    edit(tensors);
    std::vector<safetensors::TensorView> views;
    for (const OwnedTensor& t : tensors) views.push_back({t.name, t.dtype, t.shape, t.bytes});
    ASSERT_TRUE(safetensors::WriteSafetensors(Weights(), views).ok());
  }

  // The LoadModel error; fails the test when loading succeeds.
  std::string LoadError() {
    kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{.num_threads = 1});
    auto m = model::LoadModel(dir_.path(), backend, model::ModelLoadOptions{.max_num_tokens = 16});
    EXPECT_FALSE(m.ok()) << "loaded a broken directory";
    return m.ok() ? "" : std::string(m.status().message());
  }

  ScratchDir dir_;
};

TEST_F(BadModelDirTest, IntactCopyLoads) {
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{.num_threads = 1});
  auto m = model::LoadModel(dir_.path(), backend, model::ModelLoadOptions{.max_num_tokens = 16});
  EXPECT_TRUE(m.ok()) << m.status();
}

TEST_F(BadModelDirTest, MissingConfig) {
  fs::remove(dir_ / "config.json");
  EXPECT_NE(LoadError().find(dir_ / "config.json"), std::string::npos);
}

TEST_F(BadModelDirTest, MissingSafetensors) {
  fs::remove(Weights());
  const std::string error = LoadError();
  EXPECT_NE(error.find(dir_.path()), std::string::npos) << error;
  EXPECT_NE(error.find("safetensors"), std::string::npos) << error;
}

TEST_F(BadModelDirTest, WrongShape) {
  RewriteWeights([](std::vector<OwnedTensor>& tensors) {
    for (OwnedTensor& t : tensors) {
      if (t.name == "model.layers.1.self_attn.q_proj.weight") std::swap(t.shape[0], t.shape[1]);
    }
  });
  const std::string error = LoadError();
  EXPECT_NE(error.find("model.layers.1.self_attn.q_proj.weight has shape [64, 128], expected "
                       "[128, 64]"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find(dir_.path()), std::string::npos) << error;
}

TEST_F(BadModelDirTest, MissingTensor) {
  RewriteWeights([](std::vector<OwnedTensor>& tensors) {
    std::erase_if(tensors, [](const OwnedTensor& t) {
      return t.name == "model.layers.0.mlp.down_proj.weight";
    });
  });
  const std::string error = LoadError();
  EXPECT_NE(error.find("missing tensor model.layers.0.mlp.down_proj.weight"), std::string::npos)
      << error;
}

TEST_F(BadModelDirTest, UnexpectedTensor) {
  RewriteWeights([](std::vector<OwnedTensor>& tensors) {
    tensors.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", safetensors::DType::kF32,
                       {16}, std::vector<std::byte>(64)});
  });
  const std::string error = LoadError();
  EXPECT_NE(error.find("unexpected tensor model.layers.0.self_attn.rotary_emb.inv_freq"),
            std::string::npos)
      << error;
}

TEST_F(BadModelDirTest, TruncatedSafetensors) {
  const std::string bytes = ReadFileBytes(Weights());
  WriteFileBytes(Weights(), bytes.substr(0, bytes.size() / 2));
  const std::string error = LoadError();
  EXPECT_NE(error.find(Weights()), std::string::npos) << error;
}

}  // namespace
}  // namespace xserv::tools
