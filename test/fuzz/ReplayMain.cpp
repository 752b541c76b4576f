//===- ReplayMain.cpp - Run the fuzz target over files, without libFuzzer -===//
//
// `attnc-parser-replay FILE|DIR...` feeds every file to the fuzz target's
// entry point under the normal build, so the corpus (and every past finding)
// is replayed by the test suite on machines without clang's libFuzzer.
//
//===----------------------------------------------------------------------===//
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (auto &e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file())
          files.push_back(e.path());
    } else {
      files.push_back(p);
    }
  }
  for (const auto &f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", f.c_str());
      return 1;
    }
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs\n", files.size());
  return files.empty() ? 1 : 0;
}
