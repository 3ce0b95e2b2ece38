#include "core/blas_core.h"

#include <cblas.h>

namespace qat {

const char* blas_core_name() { return openblas_get_corename(); }

}  // namespace qat
