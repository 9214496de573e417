// Several models in one process: an encoder executable and a decoder executable, each loaded
// once and run by its own threads. The encoder writes its named output `hidden` straight into
// one of a few caller-owned buffers (SetOutputBuffer); a decoder thread binds that same buffer
// as its named input `hidden` (SetInputZeroCopy): no copy between the two models. Results
// must equal a sequential run byte for byte, and a double-precision oracle computed here.
// Labelled `threads`: the ThreadSanitizer stage runs it.
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "gtest/gtest.h"
#include "tests/vm_fixture.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

constexpr int kIn = 16, kHidden = 32, kOut = 8;

Tensor RandomF32(std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// A queue of (buffer slot, request id) pairs.
class Queue {
 public:
  void Push(std::pair<int, int> v) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(v);
    }
    cv_.notify_one();
  }
  std::pair<int, int> Pop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !items_.empty(); });
    std::pair<int, int> v = items_.front();
    items_.pop_front();
    return v;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int, int>> items_;
};

class EncoderDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    {  // encoder: hidden = tanh(x @ We + be)
      compiler::Module m;
      compiler::GraphBuilder g(m.AddFunction("encode"));
      compiler::Value* x = g.Input("x", DType::kF32, {int64_t{1}, int64_t{kIn}});
      compiler::Value* h =
          g.Op("Tanh", {g.Op("Add", {g.Op("MatMul", {x, g.Constant(we_, "We", true)}),
                                     g.Constant(be_, "be", true)})});
      g.Output("hidden", h);
      encoder_ = testing::CompileAndLoad(m).exe;
    }
    {  // decoder: logits = hidden @ Wd
      compiler::Module m;
      compiler::GraphBuilder g(m.AddFunction("decode"));
      compiler::Value* h = g.Input("hidden", DType::kF32, {int64_t{1}, int64_t{kHidden}});
      g.Output("logits", g.Op("MatMul", {h, g.Constant(wd_, "Wd", true)}));
      decoder_ = testing::CompileAndLoad(m).exe;
    }
    ASSERT_NE(encoder_, nullptr);
    ASSERT_NE(decoder_, nullptr);
  }

  static Tensor Input(int id) { return RandomF32({1, kIn}, 1000 + static_cast<uint32_t>(id)); }

  std::vector<double> Oracle(const Tensor& x) const {
    std::vector<double> h(kHidden), y(kOut, 0.0);
    for (int j = 0; j < kHidden; ++j) {
      double acc = be_.data<float>()[j];
      for (int i = 0; i < kIn; ++i)
        acc += double{x.data<float>()[i]} * we_.data<float>()[i * kHidden + j];
      h[j] = std::tanh(acc);
    }
    for (int k = 0; k < kOut; ++k) {
      for (int j = 0; j < kHidden; ++j) y[k] += h[j] * wd_.data<float>()[j * kOut + k];
    }
    return y;
  }

  Tensor we_ = RandomF32({kIn, kHidden}, 1);
  Tensor be_ = RandomF32({kHidden}, 2);
  Tensor wd_ = RandomF32({kHidden, kOut}, 3);
  std::shared_ptr<const Executable> encoder_, decoder_;
};

TEST_F(EncoderDecoderTest, EncoderOutputsFeedDecoderInputsWithoutCopiesAcrossThreads) {
  constexpr int kRequests = 200, kSlots = 4, kEncoders = 2, kDecoders = 2;
  // Sequential reference (with copies), checked against the oracle.
  std::vector<std::vector<float>> reference(kRequests);
  {
    std::unique_ptr<VirtualMachine> enc = *VirtualMachine::Create(encoder_);
    std::unique_ptr<VirtualMachine> dec = *VirtualMachine::Create(decoder_);
    for (int id = 0; id < kRequests; ++id) {
      const Tensor x = Input(id);
      ASSERT_TRUE(enc->SetInput("x", x).ok());
      ASSERT_TRUE(enc->Run().ok());
      ASSERT_TRUE(dec->SetInput("hidden", *enc->GetOutput("hidden")).ok());
      ASSERT_TRUE(dec->Run().ok());
      const Tensor y = *dec->GetOutput("logits");
      ASSERT_EQ(y.ShapeString(), "[1,8]");
      reference[id].assign(y.data<float>(), y.data<float>() + kOut);
      const std::vector<double> want = Oracle(x);
      for (int k = 0; k < kOut; ++k) ASSERT_NEAR(reference[id][k], want[k], 1e-4) << id << " " << k;
    }
  }

  std::vector<Tensor> slots;
  Queue free_slots, ready;
  for (int s = 0; s < kSlots; ++s) {
    slots.push_back(*Tensor::Empty(DType::kF32, {1, kHidden}));
    free_slots.Push({s, -1});
  }
  std::vector<std::vector<float>> results(kRequests);
  std::atomic<int> next{0}, failures{0};
  std::vector<std::thread> threads;
  for (int e = 0; e < kEncoders; ++e) {
    threads.emplace_back([&] {
      absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(encoder_);
      if (!vm.ok()) ++failures;
      for (int id = next++; id < kRequests; id = next++) {
        const int slot = free_slots.Pop().first;
        const Tensor x = Input(id);
        bool ok = vm.ok() && (*vm)->SetOutputBuffer("hidden", slots[slot]).ok() &&
                  (*vm)->SetInputZeroCopy("x", x).ok() && (*vm)->Run().ok() &&
                  (*vm)->last_run_output_copies() == 0;
        if (ok) {
          absl::StatusOr<Tensor> h = (*vm)->GetOutput("hidden");
          ok = h.ok() && h->raw_data() == slots[slot].raw_data();
        }
        if (!ok) ++failures;
        ready.Push({slot, id});
      }
    });
  }
  for (int d = 0; d < kDecoders; ++d) {
    threads.emplace_back([&] {
      absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(decoder_);
      if (!vm.ok()) ++failures;
      for (;;) {
        const auto [slot, id] = ready.Pop();
        if (id < 0) return;  // stop
        bool ok =
            vm.ok() && (*vm)->SetInputZeroCopy("hidden", slots[slot]).ok() && (*vm)->Run().ok();
        absl::StatusOr<Tensor> y =
            ok ? (*vm)->GetOutput("logits") : absl::InternalError("run failed");
        if (y.ok()) {
          results[id].assign(y->data<float>(), y->data<float>() + y->numel());
        } else {
          ++failures;
        }
        free_slots.Push({slot, -1});
      }
    });
  }
  for (int e = 0; e < kEncoders; ++e) threads[e].join();
  for (int d = 0; d < kDecoders; ++d) ready.Push({0, -1});
  for (int d = 0; d < kDecoders; ++d) threads[kEncoders + d].join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(results, reference);
}

}  // namespace
}  // namespace dynvm
