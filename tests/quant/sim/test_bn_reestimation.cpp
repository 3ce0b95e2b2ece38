// Batch-norm re-estimation (quant/sim/bn_reestimation.h, Note [BN
// re-estimation]): the running statistics end as the average of the
// batches' statistics, whatever they were before, and nothing else of the
// model changes.
#include <vector>

#include "layers/layers.h"
#include "models/models.h"
#include "quant/sim/bn_reestimation.h"
#include "quant/sim/prepare.h"
#include "quant/sim/qat_modules.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;

namespace {

// Per-channel mean and unbiased variance of one (N, C, H, W) batch, in double.
struct ChannelStats {
  std::vector<double> mean, var;
};

ChannelStats channel_stats(const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1), P = x.size(2) * x.size(3);
  const std::vector<float> v = x.to_vector();
  ChannelStats s{std::vector<double>(C), std::vector<double>(C)};
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0, sq = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < P; ++i) sum += v[(n * C + c) * P + i];
    const double mu = sum / static_cast<double>(N * P);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < P; ++i) sq += (v[(n * C + c) * P + i] - mu) * (v[(n * C + c) * P + i] - mu);
    s.mean[c] = mu;
    s.var[c] = sq / static_cast<double>(N * P - 1);
  }
  return s;
}

// Feeds batches[0], batches[1], ... then says there are no more.
std::function<bool(Tensor&)> feed(const std::vector<Tensor>& batches) {
  auto next = std::make_shared<size_t>(0);
  return [&batches, next](Tensor& images) {
    if (*next >= batches.size()) return false;
    images = batches[(*next)++];
    return true;
  };
}

}  // namespace

TEST_CASE("BN re-estimation: the running statistics become the average of the batches' statistics",
          "[quant][bn_reestimation]") {
  BatchNorm2d bn(3);
  bn.running_mean.copy_(Tensor::from_vector({5.f, -7.f, 100.f}, {3}));  // stale statistics
  bn.running_var.copy_(Tensor::from_vector({9.f, 1e-4f, 400.f}, {3}));
  Generator g(11);
  // Three batches with different statistics: the average is not any one of them.
  const std::vector<Tensor> batches = {Tensor::randn({4, 3, 5, 5}, g, 0.f, 1.f),
                                       Tensor::randn({4, 3, 5, 5}, g, 2.f, 3.f),
                                       Tensor::randn({4, 3, 5, 5}, g, -1.f, 0.5f)};
  const int64_t used = reestimate_bn_statistics(bn, 10, feed(batches));
  CHECK(used == 3);  // the feed ran out first
  std::vector<double> mean(3, 0.0), var(3, 0.0);
  for (const Tensor& b : batches) {
    const ChannelStats s = channel_stats(b);
    for (int c = 0; c < 3; ++c) mean[c] += s.mean[c] / 3, var[c] += s.var[c] / 3;
  }
  const std::vector<float> rm = bn.running_mean.to_vector(), rv = bn.running_var.to_vector();
  for (int c = 0; c < 3; ++c) {
    // float updates (1 - 1/i) r + (1/i) x over three batches: a few roundings
    CHECK(rm[c] == Approx(mean[c]).epsilon(1e-5).margin(1e-6));
    CHECK(rv[c] == Approx(var[c]).epsilon(1e-5));
  }
  CHECK(bn.momentum == 0.1f);  // put back
  CHECK(bn.is_training());
}

TEST_CASE("BN re-estimation uses at most the batches asked for", "[quant][bn_reestimation]") {
  BatchNorm2d bn(2);
  Generator g(12);
  const std::vector<Tensor> batches = {Tensor::randn({3, 2, 4, 4}, g, 1.f, 2.f),
                                       Tensor::randn({3, 2, 4, 4}, g, -4.f, 1.f)};
  CHECK(reestimate_bn_statistics(bn, 1, feed(batches)) == 1);
  const ChannelStats first = channel_stats(batches[0]);
  const std::vector<float> rm = bn.running_mean.to_vector(), rv = bn.running_var.to_vector();
  for (int c = 0; c < 2; ++c) {  // momentum 1 at the first batch: exactly its statistics, in float
    CHECK(rm[c] == Approx(first.mean[c]).epsilon(1e-6).margin(1e-6));
    CHECK(rv[c] == Approx(first.var[c]).epsilon(1e-6));
  }
}

// A prepared conv+bn+relu model whose running statistics went stale (as a
// 4-bit run's do, Note [BN re-estimation]): evaluated, it computes something
// else than in training; after re-estimation on the batch, nearly the same.
// The quantizers' ranges, the parameters, the frozen flag and the momentum
// are left as they were.
TEST_CASE("BN re-estimation brings a QAT model's evaluation back to what it computes in training",
          "[quant][bn_reestimation]") {
  ModulePtr model = make_model("small_cnn", 4, 0);
  prepare(*model, testing::test_backend("default"), QConfig{});
  Generator g(13);
  const Tensor x = Tensor::randn({8, 3, 8, 8}, g);
  model->train();
  {
    NoGradGuard ng;  // the running statistics settle (momentum 0.1), the observers see the batch
    for (int i = 0; i < 80; ++i) model->forward(x);
  }
  disable_observers(*model);
  std::vector<QatConv2d*> convs;
  for (auto& [name, m] : model->named_modules())
    if (auto* c = dynamic_cast<QatConv2d*>(m); c && c->bn) convs.push_back(c);
  REQUIRE(convs.size() == 2);
  for (QatConv2d* c : convs) {  // stale: shifted means, variances a third too large
    c->bn->running_mean.copy_(add(c->bn->running_mean, 0.2f));
    c->bn->running_var.copy_(mul(c->bn->running_var, 1.33f));
  }
  convs[1]->freeze_bn_stats();
  auto fqs = fake_quantizers(*model);
  std::vector<std::vector<float>> scales;
  for (FakeQuantizer* f : fqs) scales.push_back(f->qparams().scale.to_vector());
  const std::vector<float> w0 = convs[0]->weight.to_vector();

  // The largest logit difference between training mode (batch statistics;
  // the running statistics put back after) and evaluation.
  auto train_minus_eval = [&] {
    NoGradGuard ng;
    std::vector<Tensor> kept;
    for (QatConv2d* c : convs) kept.push_back(c->bn->running_mean.clone()), kept.push_back(c->bn->running_var.clone());
    convs[1]->set_bn_frozen(false);
    model->train();
    const std::vector<float> t = model->forward(x).to_vector();
    convs[1]->set_bn_frozen(true);
    for (size_t i = 0; i < convs.size(); ++i)
      convs[i]->bn->running_mean.copy_(kept[2 * i]), convs[i]->bn->running_var.copy_(kept[2 * i + 1]);
    model->eval();
    const std::vector<float> e = model->forward(x).to_vector();
    model->train();
    double worst = 0;
    for (size_t i = 0; i < t.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(t[i] - e[i])));
    return worst;
  };
  const double before = train_minus_eval();
  const std::vector<Tensor> batches = {x, x, x};
  CHECK(reestimate_bn_statistics(*model, 3, feed(batches)) == 3);
  const double after = train_minus_eval();
  INFO("largest logit difference, train (batch statistics) - eval: before " << before << ", after " << after);
  CHECK(before > 0.1);
  // What is left: the running variance is the unbiased one (x 512/511), and
  // the quantizers may round a few values one level apart.
  CHECK(after < 0.02);
  for (size_t i = 0; i < fqs.size(); ++i) CHECK(fqs[i]->qparams().scale.to_vector() == scales[i]);
  CHECK(convs[0]->weight.to_vector() == w0);
  CHECK(convs[1]->bn_frozen());
  CHECK_FALSE(convs[0]->bn_frozen());
  CHECK(convs[0]->bn->momentum == 0.1f);
  for (FakeQuantizer* f : fqs) CHECK_FALSE(f->observer_enabled());
}
