#pragma once
// Every differentiable op of qat's core, in one include.
#include "core/autograd.h"
#include "core/ops/batch_norm.h"
#include "core/ops/conv2d.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/linear.h"
#include "core/ops/loss.h"
#include "core/ops/metrics.h"
#include "core/ops/pool.h"
#include "core/ops/relu.h"
#include "core/ops/shape_ops.h"
#include "core/tensor.h"
