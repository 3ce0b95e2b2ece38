#pragma once
// A test-only observer: the range is fixed at construction, whatever it sees
// (it counts the tensors it was shown). Written as any new observer would be,
// against quant/observe/observer.h alone.
#include <sstream>
#include <string>

#include "quant/observe/observer.h"

namespace qat::testing {

class FixedRangeObserver final : public quant::Observer {
 public:
  FixedRangeObserver(const quant::QuantSpec& spec, int64_t channels, float lo, float hi)
      : Observer(spec, channels), lo_(lo), hi_(hi) {
    reset();
  }
  quant::Range range() const override { return {min_, max_}; }
  void reset() override {
    min_ = Tensor::full({channels()}, lo_);
    max_ = Tensor::full({channels()}, hi_);
    seen = 0;
  }
  std::string describe() const override {
    std::ostringstream os;
    os << "FixedRange[" << lo_ << ", " << hi_ << "]";
    return os.str();
  }
  int64_t seen = 0;  // tensors observed

 protected:
  void update(const Tensor&) override { ++seen; }

 private:
  float lo_, hi_;
  Tensor min_, max_;
};

}  // namespace qat::testing
