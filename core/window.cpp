#include "core/window.h"

#include "core/checked.h"
#include "core/error.h"

namespace qat {

int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, const char* op) {
  QAT_CHECK(in >= 0 && k >= 1 && stride >= 1 && pad >= 0 && dil >= 1, op, ": invalid geometry (input ", in, ", kernel ",
            k, ", stride ", stride, ", padding ", pad, ", dilation ", dil, ")");
  const int64_t span = checked_add(checked_mul(dil, k - 1, op), 1, op);
  const int64_t padded = checked_add(in, checked_mul(2, pad, op), op);
  QAT_CHECK(padded >= span, op, ": kernel ", k, " (dilation ", dil, ") larger than input ", in, " + 2*padding ", pad);
  return (padded - span) / stride + 1;
}

}  // namespace qat
