//===- Manifest.h - The artifact's manifest.json ----------------*- C++ -*-===//
#ifndef ATTNC_CODEGEN_MANIFEST_H
#define ATTNC_CODEGEN_MANIFEST_H

#include "codegen/KernelEmitter.h"

#include "llvm/Support/raw_ostream.h"

namespace attnc::codegen {

/// Format version of manifest.json; the runtime refuses other versions.
inline constexpr int kManifestVersion = 1;

struct ManifestInfo {
  std::string specHash; ///< SHA-256 of the spec text (hex), or ""
  std::string target;   ///< cuda or cpu
  std::string arch;     ///< sm_XX for cuda, "host" for cpu
  std::string source;   ///< file name of the kernel source in the artifact
  std::vector<KernelInfo> kernels;
  /// The compiled training steps ("models"), each a JSON object the driver
  /// serialised (runtime/Artifact.h ManifestModel reads them back).
  std::vector<std::string> models;
};

/// Writes manifest.json (pretty-printed, stable key order).
void writeManifest(const ManifestInfo &info, llvm::raw_ostream &os);

} // namespace attnc::codegen

#endif // ATTNC_CODEGEN_MANIFEST_H
