// The CUDA kernels (gpu/cuda_kernels.cu) compiled as host C++, one thread running each kernel's
// whole grid-stride loop, checked against the CPU kernels bit for bit: their arithmetic is
// verified on every machine, with or without a GPU (test_cuda runs the same cases on a device).
#include <cstdio>
#include <cstring>
#include <vector>

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
// The kernels by rd_dtype, as cuda_dev.c loads them by name.
void (*const kernels[RD_DT_COUNT])(void *, rd_cuda_srcs, int, size_t, int, double, double,
                                   uint32_t) = {
    rd_cuda_reduce_f32, rd_cuda_reduce_f64, rd_cuda_reduce_f16, rd_cuda_reduce_bf16,
    rd_cuda_reduce_i32, rd_cuda_reduce_i64, rd_cuda_reduce_u8};

// Each case runs twice: on the buffers as given (16-byte aligned, from malloc: the packed loop)
// and on copies one element off that alignment (the single-element loop). The first result is
// the one checked against the CPU kernels; the second must equal it (NaN payloads aside: the
// host compiler may order a NaN's operands either way).
int run_on_host(void *, rd_dtype dt, rd_redop op, void *dst, const void *const *src, int nsrc,
                size_t count, const rd_reduce_args *a, char *why, size_t whylen)
{
    rd_cuda_srcs s{}, shifted{};
    if (unsigned(dt) >= RD_DT_COUNT) {
        std::snprintf(why, whylen, "dtype %d", int(dt));
        return -1;
    }
    size_t es = rd_dtype_size(dt), bytes = count * es;
    std::vector<std::vector<unsigned char>> copies;
    for (int k = 0; k < nsrc; k++) {
        s.p[k] = src[k];
        copies.emplace_back(bytes + es);
        std::memcpy(copies.back().data() + es, src[k], bytes);
        shifted.p[k] = copies.back().data() + es;
    }
    std::vector<unsigned char> out(bytes + es);
    kernels[dt](dst, s, nsrc, count, op, a->prescale, a->postscale, a->divisor);
    kernels[dt](out.data() + es, shifted, nsrc, count, op, a->prescale, a->postscale, a->divisor);
    for (size_t i = 0; i < count; i++) {
        if (!rd_kernel_same(dt, dst, out.data() + es, i)) {
            std::snprintf(why, whylen, "the packed and single-element loops differ at %zu", i);
            return -1;
        }
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
