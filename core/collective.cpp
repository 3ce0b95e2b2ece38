#include "core/collective.h"

namespace qat {

namespace {
Collective* g_collective = nullptr;
bool g_sync_bn = false;
}  // namespace

Collective* collective() { return g_collective != nullptr && g_collective->size() > 1 ? g_collective : nullptr; }
void set_collective(Collective* c) { g_collective = c; }
bool sync_batch_norm() { return g_sync_bn; }
void set_sync_batch_norm(bool on) { g_sync_bn = on; }

}  // namespace qat
