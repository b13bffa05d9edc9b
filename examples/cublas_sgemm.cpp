// Row-major C = A * B in float32 through cublasGemmEx (cuBLAS is column-major).
// Copy the function into a project that links -lcublas. The handbook's tests
// compile this file with nvcc against the real cuBLAS header
// (tests/test_cuda_compile.py::test_cublas_snippet_compiles).
#include <cublas_v2.h>

// --8<-- [start:gemmex]
// C = A * B, all row-major float32 device arrays (A: M x K, B: K x N, C: M x N).
// Read column-major, a row-major matrix is its transpose, so compute
// C^T = B^T * A^T: pass B first and swap M and N; no transposition is needed.
cublasStatus_t sgemm_row_major(cublasHandle_t handle, int M, int N, int K,
                               const float* A, const float* B, float* C)
{
    const float alpha = 1.0f, beta = 0.0f;
    return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N,
                        N, M, K,                 // dimensions of C^T (N x M)
                        &alpha,
                        B, CUDA_R_32F, N,        // B^T: N x K, leading dimension N
                        A, CUDA_R_32F, K,        // A^T: K x M, leading dimension K
                        &beta,
                        C, CUDA_R_32F, N,        // C^T: N x M, leading dimension N
                        CUBLAS_COMPUTE_32F,      // FP32 throughout; CUBLAS_COMPUTE_32F_FAST_TF32 allows TF32
                        CUBLAS_GEMM_DEFAULT);
}
// --8<-- [end:gemmex]
