// Placeholder CLI until the real one lands.
#include <cstdio>
#include <cstring>
int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--help") == 0) { std::puts("flashattn"); return 0; }
  return argc > 1 && std::strcmp(argv[1], "check") == 0 ? 0 : 2;
}
