#pragma once
// One thread setting governs both OpenMP loops and OpenBLAS, so the two never
// oversubscribe the cores.
namespace qat {
int hardware_threads();
int num_threads();
void set_num_threads(int n);  // n <= 0 means hardware_threads()
}  // namespace qat
