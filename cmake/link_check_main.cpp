// Linked with one part's whole archive and only the parts it may depend on
// (CMakeLists.txt: qat_part): building it proves the part calls nothing else.
int main() { return 0; }
