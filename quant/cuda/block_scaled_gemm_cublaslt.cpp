// block_scaled_gemm through cuBLASLt (CUDA 12.8 and later). cuBLASLt is column-major: the
// row-major y[R, N] is the column-major N x R matrix D = op(A) . B with A = the weight stored
// K x N (each weight row's K codes contiguous, transposed: "TN", the only layout FP4 takes),
// B = the activations stored K x R. The scale tensors follow each operand's outer dimension
// (N for A, R for B) in 128 x 4 tiles: the layout of quant::scale_tile_offset.
//
// moert does not link cuBLASLt: the library (several hundred MB) is opened with dlopen at the
// first call, as NCCL is (docs/expert-parallel-gpu.md), so one binary starts on machines
// without it and the block-scaled path reports itself unsupported there.
#include "quant/cuda/block_scaled_gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace moert::cuda {
namespace {

// The cuBLASLt entry points used here, resolved once from the library of the major version
// this file was compiled against.
#define MOERT_CUBLASLT_ENTRY_POINTS(X)                                                                    \
  X(Create) X(MatmulDescCreate) X(MatmulDescSetAttribute) X(MatrixLayoutCreate) X(MatmulPreferenceCreate) \
  X(MatmulPreferenceSetAttribute) X(MatmulPreferenceDestroy) X(MatmulAlgoGetHeuristic) X(Matmul)

struct CublasLtLibrary {
#define MOERT_CUBLASLT_MEMBER(name) decltype(&::cublasLt##name) name = nullptr;
  MOERT_CUBLASLT_ENTRY_POINTS(MOERT_CUBLASLT_MEMBER)
#undef MOERT_CUBLASLT_MEMBER
  cublasLtHandle_t handle = nullptr;  // null: unusable
};

const CublasLtLibrary& library() {
  static const CublasLtLibrary lib = [] {
    CublasLtLibrary l;
    const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* so = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (so == nullptr) return l;
    bool complete = true;
#define MOERT_CUBLASLT_RESOLVE(name)                                                    \
  l.name = reinterpret_cast<decltype(l.name)>(dlsym(so, "cublasLt" #name));             \
  complete = complete && l.name != nullptr;
    MOERT_CUBLASLT_ENTRY_POINTS(MOERT_CUBLASLT_RESOLVE)
#undef MOERT_CUBLASLT_RESOLVE
    if (complete && l.Create(&l.handle) != CUBLAS_STATUS_SUCCESS) l.handle = nullptr;
    return l;  // the library stays open for the life of the process
  }();
  return lib;
}

// The descriptors of one shape and the algorithm the heuristic picked (kept: the heuristic
// costs more than a small GEMM).
struct Plan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
  bool supported = false;
};

Plan make_plan(Fp4Activations format, int64_t n, int64_t r, int64_t k) {
  const CublasLtLibrary& lt = library();
  Plan plan;
  if (lt.MatmulDescCreate(&plan.operation, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return plan;
  const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
  const int32_t scale_mode = format == Fp4Activations::kNvfp4 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3
                                                              : CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
  lt.MatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose));
  lt.MatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none));
  lt.MatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &scale_mode, sizeof(scale_mode));
  lt.MatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &scale_mode, sizeof(scale_mode));
  const auto rows = [](int64_t v) { return static_cast<uint64_t>(v); };
  if (lt.MatrixLayoutCreate(&plan.a, CUDA_R_4F_E2M1, rows(k), rows(n), k) != CUBLAS_STATUS_SUCCESS ||
      lt.MatrixLayoutCreate(&plan.b, CUDA_R_4F_E2M1, rows(k), rows(r), k) != CUBLAS_STATUS_SUCCESS ||
      lt.MatrixLayoutCreate(&plan.d, CUDA_R_32F, rows(n), rows(r), n) != CUBLAS_STATUS_SUCCESS) {
    return plan;
  }
  cublasLtMatmulPreference_t preference = nullptr;
  if (lt.MatmulPreferenceCreate(&preference) != CUBLAS_STATUS_SUCCESS) return plan;
  const uint64_t workspace_bytes = kBlockScaledWorkspaceBytes;
  lt.MatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                       sizeof(workspace_bytes));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // The scale pointers are set per call; the heuristic needs only the modes.
  if (lt.MatmulAlgoGetHeuristic(lt.handle, plan.operation, plan.a, plan.b, plan.d, plan.d, preference, 1,
                                     &result, &found) == CUBLAS_STATUS_SUCCESS &&
      found > 0) {
    plan.algorithm = result.algo;
    plan.supported = true;
  }
  lt.MatmulPreferenceDestroy(preference);
  return plan;
}

}  // namespace

int block_scaled_gemm(Fp4Activations format, const BlockScaledOperand& w, const BlockScaledOperand& x, int64_t k,
                      float alpha, float* y, void* workspace, CUstream_st* stream) {
  const CublasLtLibrary& lt = library();
  if (lt.handle == nullptr || format == Fp4Activations::kNone || k % 32 != 0) return kBlockScaledUnsupported;
  if (w.rows == 0 || x.rows == 0) return 0;
  static std::mutex mutex;
  static std::map<std::tuple<Fp4Activations, int64_t, int64_t, int64_t>, Plan> plans;
  std::lock_guard<std::mutex> lock(mutex);
  auto [entry, made] = plans.try_emplace({format, w.rows, x.rows, k});
  if (made) entry->second = make_plan(format, w.rows, x.rows, k);
  Plan& plan = entry->second;
  if (!plan.supported) return kBlockScaledUnsupported;
  lt.MatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w.tiled_scales,
                                 sizeof(w.tiled_scales));
  lt.MatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x.tiled_scales,
                                 sizeof(x.tiled_scales));
  const float beta = 0.0f;
  const cublasStatus_t status =
      lt.Matmul(lt.handle, plan.operation, &alpha, w.codes, plan.a, x.codes, plan.b, &beta, y, plan.d, y,
                     plan.d, &plan.algorithm, workspace, static_cast<size_t>(kBlockScaledWorkspaceBytes), stream);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return kBlockScaledUnsupported;
  return status == CUBLAS_STATUS_SUCCESS ? 0 : static_cast<int>(status);
}

}  // namespace moert::cuda
