#include "quant/integer/int_op.h"

#include <iterator>

#include "core/error.h"

namespace qat::quant {

// Each defined beside its kernel in ops/.
extern constinit const IntOpDef kQuantizeInputOp, kConvOp, kLinearOp, kMaxPoolOp, kAdaptiveAvgPoolOp, kFlattenOp,
    kReluOp, kAddOp, kConcatOp;

namespace {
// In the order of IntOp.
const IntOpDef* const kIntOps[] = {&kQuantizeInputOp,   &kConvOp,    &kLinearOp, &kMaxPoolOp,
                                   &kAdaptiveAvgPoolOp, &kFlattenOp, &kReluOp,   &kAddOp, &kConcatOp};
static_assert(std::size(kIntOps) == static_cast<size_t>(IntOp::count_), "every IntOp needs its entry in kIntOps");
}  // namespace

const IntOpDef& int_op_def(IntOp op) {
  const auto i = static_cast<size_t>(op);
  QAT_CHECK(i < std::size(kIntOps) && kIntOps[i]->op == op, "integer op ", static_cast<int>(op), " is not registered");
  return *kIntOps[i];
}

const IntOpDef* find_int_op(const std::string& name) {
  for (const IntOpDef* d : kIntOps)
    if (name == d->name) return d;
  return nullptr;
}

IntOp int_op_from_name(const std::string& name) {
  if (const IntOpDef* d = find_int_op(name)) return d->op;
  std::string known;
  for (const IntOpDef* d : kIntOps) known += (known.empty() ? "" : ", ") + std::string(d->name);
  throw Error("unknown integer layer kind '" + name + "' (known: " + known + ")");
}

}  // namespace qat::quant
