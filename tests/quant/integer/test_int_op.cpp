// The integer-op table (int_op.h): every op registered once, in IntOp order,
// under its own name; unknown names are refused with the known ones listed.
#include "quant/integer/int_op.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;
using Catch::Matchers::Contains;

TEST_CASE("every integer op is registered under its own name", "[quant][integer]") {
  for (int i = 0; i < static_cast<int>(IntOp::count_); ++i) {
    const auto op = static_cast<IntOp>(i);
    const IntOpDef& d = int_op_def(op);
    INFO(d.name);
    CHECK(d.op == op);
    CHECK(d.infer != nullptr);
    CHECK(int_op_from_name(d.name) == op);
    CHECK(find_int_op(d.name) == &d);
  }
  // The field groups the export and freeze rely on.
  CHECK(int_op_def(IntOp::conv).has(kMatmul | kConvGeometry));
  CHECK(int_op_def(IntOp::linear).has(kMatmul));
  CHECK(!int_op_def(IntOp::linear).has(kConvGeometry));
  CHECK(int_op_def(IntOp::max_pool).has(kPoolGeometry));
  CHECK(int_op_def(IntOp::adaptive_avg_pool).has(kOutputSize | kRoundsOntoInputGrid));
  CHECK(int_op_def(IntOp::quantize_input).has(kFloatInput));
  CHECK(find_int_op("softmax") == nullptr);
  REQUIRE_THROWS_WITH(int_op_from_name("softmax"),
                      Contains("'softmax'") && Contains("quantize_input, conv, linear, max_pool, adaptive_avg_pool"));
}
