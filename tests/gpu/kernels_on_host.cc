// The CUDA kernels (gpu/cuda_kernels.cu) compiled as host C++, one thread running each kernel's
// whole grid-stride loop, checked against the CPU kernels bit for bit: their arithmetic is
// verified on every machine, with or without a GPU (test_cuda runs the same cases on a device).
#include <cstdio>

extern "C" {
#include "backend.h"
}
#include "kernel_cases.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
namespace
{
struct dim {
    unsigned x;
};
const dim gridDim{1}, blockDim{1}, blockIdx{0}, threadIdx{0};
} // namespace
#include "cuda_kernels.cu"

namespace
{
int run_on_host(void *, rd_dtype dt, rd_redop op, void *dst, const void *const *src, int nsrc,
                size_t count, const rd_reduce_args *a, char *why, size_t whylen)
{
    rd_cuda_srcs s{};
    for (int k = 0; k < nsrc; k++)
        s.p[k] = src[k];
    switch (dt) {
    case RD_DT_F32:
        rd_cuda_reduce_f32(dst, s, nsrc, count, op, a->prescale, a->postscale, a->divisor);
        break;
    case RD_DT_F64:
        rd_cuda_reduce_f64(dst, s, nsrc, count, op, a->prescale, a->postscale, a->divisor);
        break;
    case RD_DT_F16:
        rd_cuda_reduce_f16(dst, s, nsrc, count, op, a->prescale, a->postscale, a->divisor);
        break;
    case RD_DT_BF16:
        rd_cuda_reduce_bf16(dst, s, nsrc, count, op, a->prescale, a->postscale, a->divisor);
        break;
    case RD_DT_I32:
        rd_cuda_reduce_i32(dst, s, nsrc, count, op, a->prescale, a->postscale, a->divisor);
        break;
    case RD_DT_I64:
        rd_cuda_reduce_i64(dst, s, nsrc, count, op, a->prescale, a->postscale, a->divisor);
        break;
    case RD_DT_U8:
        rd_cuda_reduce_u8(dst, s, nsrc, count, op, a->prescale, a->postscale, a->divisor);
        break;
    default: std::snprintf(why, whylen, "dtype %d", int(dt)); return -1;
    }
    return 0;
}
} // namespace

int main()
{
    static const size_t counts[] = {1, 2, 7, 1000, 1025, 4099};
    long ran = 0;
    long bad = rd_check_kernels(run_on_host, nullptr, counts, 6, RD_CUDA_MAX_SRC, ~0u, &ran);
    std::printf("CUDA kernels run on the host: %ld cases, %ld differ from the CPU kernels\n", ran,
                bad);
    return bad ? 1 : 0;
}
