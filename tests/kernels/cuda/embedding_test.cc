// CUDA embeddings against the CPU backend: token lookup and its gradient
// (with repeated ids, into fp32 / bf16 / fp16 tables that already hold
// values), positional add and its gradient.
//
// Tolerance: exact, everywhere. The lookups copy or add the same values; the
// token gradient adds each row into the table in row order, rounding after
// each add, as the CPU kernel does (see embedding.cu); the positional gradient
// sums the batch in order from zero and then adds into the table, as the CPU
// does (the direct column-sum path, batch <= 256).
#include "core/strings.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace zero::cuda_test {
namespace {

class EmbeddingTest : public CudaVsCpuTest {
 protected:
  std::vector<int32_t> skewed_ids(int64_t n, int32_t vocab, uint32_t seed) {
    // Half the rows draw from 3 ids, so the gradient has long repeated runs.
    const std::vector<float> u = uniform_values(n, seed, 0.0f, 1.0f);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (size_t i = 0; i < ids.size(); ++i) {
      const float x = u[i];
      ids[i] = x < 0.5f ? static_cast<int32_t>(x * 6.0f)
                        : static_cast<int32_t>((x - 0.5f) * 2.0f * static_cast<float>(vocab - 1));
    }
    return ids;
  }
};

TEST_F(EmbeddingTest, LookupAndGradientMatchCpuExactly) {
  const int32_t vocab = 97;
  const int64_t n = 300, cols = 72;
  const std::vector<int32_t> id_values = skewed_ids(n, vocab, 61);
  Mirrored ids = mirrored_ids(id_values, Shape{n});
  for (DType table_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(cat("table ", dtype_name(table_dtype)));
    Mirrored table = random(Shape{vocab, cols}, table_dtype, 62);
    Mirrored out = random(Shape{n, cols}, DType::kF32, 63);
    cpu_.ops().embedding_forward(ids.cpu, table.cpu, out.cpu);
    gpu_->ops().embedding_forward(ids.gpu, table.gpu, out.gpu);
    expect_exact(values(out.gpu), values(out.cpu), "lookup");

    Mirrored dout = random(Shape{n, cols}, DType::kF32, 64);
    Mirrored dtable = random(Shape{vocab, cols}, table_dtype, 65);
    cpu_.ops().embedding_backward(ids.cpu, dout.cpu, dtable.cpu);
    gpu_->ops().embedding_backward(ids.gpu, dout.gpu, dtable.gpu);
    expect_exact(values(dtable.gpu), values(dtable.cpu), "dtable after one backward");
    // A second micro-batch accumulates on top.
    cpu_.ops().embedding_backward(ids.cpu, dout.cpu, dtable.cpu);
    gpu_->ops().embedding_backward(ids.gpu, dout.gpu, dtable.gpu);
    expect_exact(values(dtable.gpu), values(dtable.cpu), "dtable after two backwards");
  }
}

// A vocabulary-parallel slice (rows [first, first + rows) of the
// vocabulary): ids outside give zero rows and no gradient, exactly as on the CPU.
TEST_F(EmbeddingTest, VocabularySliceLookupAndGradientMatchCpuExactly) {
  const int32_t vocab = 997;
  const int64_t n = 4000, cols = 40, first = 300, rows = 250;
  Mirrored ids = mirrored_ids(skewed_ids(n, vocab, 81), Shape{n});
  Mirrored table = random(Shape{rows, cols}, DType::kBF16, 82);
  Mirrored out = random(Shape{n, cols}, DType::kF32, 83);
  cpu_.ops().embedding_slice_forward(ids.cpu, first, table.cpu, out.cpu);
  gpu_->ops().embedding_slice_forward(ids.gpu, first, table.gpu, out.gpu);
  expect_exact(values(out.gpu), values(out.cpu), "slice lookup");
  Mirrored dout = random(Shape{n, cols}, DType::kF32, 84);
  Mirrored dtable = random(Shape{rows, cols}, DType::kF32, 85);
  cpu_.ops().embedding_slice_backward(ids.cpu, first, dout.cpu, dtable.cpu);
  gpu_->ops().embedding_slice_backward(ids.gpu, first, dout.gpu, dtable.gpu);
  expect_exact(values(dtable.gpu), values(dtable.cpu), "slice dtable");
}

TEST_F(EmbeddingTest, GradientOfLargeBatchMatchesCpuExactly) {
  // A batch large enough for a multi-block radix sort, with long runs of equal ids.
  const int32_t vocab = 5000;
  const int64_t n = 20000, cols = 33;
  Mirrored ids = mirrored_ids(skewed_ids(n, vocab, 71), Shape{n});
  Mirrored dout = random(Shape{n, cols}, DType::kF32, 72);
  Mirrored dtable = random(Shape{vocab, cols}, DType::kBF16, 73);
  cpu_.ops().embedding_backward(ids.cpu, dout.cpu, dtable.cpu);
  gpu_->ops().embedding_backward(ids.gpu, dout.gpu, dtable.gpu);
  expect_exact(values(dtable.gpu), values(dtable.cpu), "dtable");
}

TEST_F(EmbeddingTest, PositionalAddAndGradientMatchCpuExactly) {
  const int64_t batch = 5, seq = 13, cols = 40, max_seq = 16;
  for (DType table_dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(cat("table ", dtype_name(table_dtype)));
    Mirrored x = random(Shape{batch, seq, cols}, DType::kF32, 81);
    Mirrored table = random(Shape{max_seq, cols}, table_dtype, 82);
    cpu_.ops().add_positional(x.cpu, table.cpu);
    gpu_->ops().add_positional(x.gpu, table.gpu);
    expect_exact(values(x.gpu), values(x.cpu), "x + positions");

    Mirrored dy = random(Shape{batch, seq, cols}, DType::kF32, 83);
    Mirrored dtable = random(Shape{max_seq, cols}, table_dtype, 84);
    cpu_.ops().positional_backward(dy.cpu, dtable.cpu);
    gpu_->ops().positional_backward(dy.gpu, dtable.gpu);
    expect_exact(values(dtable.gpu), values(dtable.cpu), "dtable (rows >= T untouched)");
  }
}

}  // namespace
}  // namespace zero::cuda_test
