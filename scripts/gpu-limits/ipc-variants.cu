// Store-kernel variants against the copy engine, one GPU, device-to-device (what `ipc --same-gpu` moves):
// the exploration behind `kernel (tuned)` in transports/cuda/src/ipc.rs (issue 32). Build and run on the GPU
// machine: nvcc -O3 -arch=sm_90 -o /tmp/v ipc-variants.cu && /tmp/v
// Prints GB/s per size for the copy engine, the seed's kernel at 128x256 and each variant, verified.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <string>
#include <algorithm>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

__global__ void seed(const uint4* __restrict__ source, uint4* __restrict__ target, unsigned long long vectors) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < vectors; i += 4 * stride) {
        uint4 a = source[i], b = source[i + stride], c = source[i + 2 * stride], d = source[i + 3 * stride];
        target[i] = a; target[i + stride] = b; target[i + 2 * stride] = c; target[i + 3 * stride] = d;
    }
    for (; i < vectors; i += stride) target[i] = source[i];
    __threadfence_system();
}

__device__ __forceinline__ uint4 load_cs(const uint4* p) { return __ldcs(p); }
__device__ __forceinline__ void store_cs(uint4* p, uint4 v) { __stcs(p, v); }
__device__ __forceinline__ uint4 load_nc(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// Block tiles: tile t is U * blockDim contiguous vectors, tiles dealt to blocks round-robin.
// MODE 0 plain, 1 streaming (ldcs/stcs), 2 nc no-allocate loads + plain stores.
template <int U, int MODE, bool FENCE, int B, int K>
__global__ void __launch_bounds__(B, K) tiled(const uint4* __restrict__ source, uint4* __restrict__ target, unsigned long long vectors) {
    const unsigned long long tile = (unsigned long long)U * blockDim.x;
    const unsigned long long tiles = vectors / tile;
    for (unsigned long long t = blockIdx.x; t < tiles; t += gridDim.x) {
        const unsigned long long base = t * tile + threadIdx.x;
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint4* p = source + base + (unsigned long long)u * blockDim.x;
            v[u] = MODE == 1 ? load_cs(p) : MODE == 2 ? load_nc(p) : *p;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            uint4* p = target + base + (unsigned long long)u * blockDim.x;
            if (MODE == 1) store_cs(p, v[u]); else *p = v[u];
        }
    }
    for (unsigned long long i = tiles * tile + blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < vectors;
         i += (unsigned long long)gridDim.x * blockDim.x)
        target[i] = source[i];
    if (FENCE) __threadfence_system();
}

// Grid-stride with U loads in flight (the seed's shape, more of them).
template <int U, int B, int K>
__global__ void __launch_bounds__(B, K) strided(const uint4* __restrict__ source, uint4* __restrict__ target, unsigned long long vectors) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < vectors; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = source[i + u * stride];
#pragma unroll
        for (int u = 0; u < U; u++) target[i + u * stride] = v[u];
    }
    for (; i < vectors; i += stride) target[i] = source[i];
    __threadfence_system();
}

typedef void (*Kernel)(const uint4*, uint4*, unsigned long long);

struct Variant { std::string name; Kernel k; int grid; int block; bool ce; };

__global__ void fill(unsigned int* p, unsigned long long n, unsigned int key) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x)
        p[i] = (unsigned int)(i * 2654435761u) ^ key;
}
__global__ void check(const unsigned int* p, unsigned long long n, unsigned int key, unsigned long long* bad) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x)
        if (p[i] != ((unsigned int)(i * 2654435761u) ^ key)) atomicAdd(bad, 1ULL);
}

int main(int argc, char** argv) {
    int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
    const size_t maxlen = 1ull << 30;
    uint4 *src, *dst; unsigned long long* bad;
    CK(cudaMalloc(&src, maxlen)); CK(cudaMalloc(&dst, maxlen)); CK(cudaMalloc(&bad, 8));
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<Variant> vs;
    vs.push_back({"CE", nullptr, 0, 0, true});
    vs.push_back({"seed 128x256", seed, 128, 256, false});
    vs.push_back({"seed 264x1024", seed, 2 * sms, 1024, false});
    // Launch bounds = the launched shape (K blocks of B per SM), so registers allow all U loads in flight.
#define V(label, kernel, B, K) do { char n[64]; snprintf(n, 64, "%s %dx%d", label, (K) * sms, B); \
        vs.push_back({n, kernel, (K) * sms, B, false}); } while (0)
#define SHAPE(B, K) \
    V("tiled8", (tiled<8, 0, true, B, K>), B, K); \
    V("tiled4", (tiled<4, 0, true, B, K>), B, K); \
    V("tiled8cs", (tiled<8, 1, true, B, K>), B, K); \
    V("tiled8nc", (tiled<8, 2, true, B, K>), B, K);
    SHAPE(256, 4) SHAPE(512, 2) SHAPE(1024, 1) SHAPE(256, 8) SHAPE(512, 4) SHAPE(1024, 2) SHAPE(256, 2) SHAPE(512, 1)
    V("strided8", (strided<8, 512, 2>), 512, 2);
    V("strided8", (strided<8, 256, 8>), 256, 8);
    V("tiled16", (tiled<16, 0, true, 256, 2>), 256, 2);
    V("tiled16", (tiled<16, 0, true, 256, 4>), 256, 4);
    V("tiled8nofence", (tiled<8, 0, false, 512, 2>), 512, 2);
    V("tiled8nofence", (tiled<8, 0, false, 512, 4>), 512, 4);
    const int warmup = 3, iters = 20;
    std::vector<size_t> sizes;
    for (size_t z = 8ull << 20; z <= maxlen; z <<= 1) sizes.push_back(z);
    std::vector<std::vector<double>> gbs(vs.size(), std::vector<double>(sizes.size()));
    cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    unsigned int key = 1;
    for (size_t zi = 0; zi < sizes.size(); zi++) {
        size_t len = sizes[zi];
        for (size_t vi = 0; vi < vs.size(); vi++) {
            Variant& v = vs[vi];
            key++;
            fill<<<1024, 256, 0, s>>>((unsigned int*)src, len / 4, key);
            fill<<<1024, 256, 0, s>>>((unsigned int*)dst, len / 4, ~key);
            auto pass = [&]() {
                if (v.ce) CK(cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToDevice, s));
                else v.k<<<v.grid, v.block, 0, s>>>(src, dst, len / 16);
            };
            for (int i = 0; i < warmup; i++) pass();
            CK(cudaEventRecord(a, s));
            for (int i = 0; i < iters; i++) pass();
            CK(cudaEventRecord(b, s));
            CK(cudaGetLastError());
            CK(cudaMemsetAsync(bad, 0, 8, s));
            check<<<1024, 256, 0, s>>>((unsigned int*)dst, len / 4, key, bad);
            unsigned long long nbad; CK(cudaMemcpyAsync(&nbad, bad, 8, cudaMemcpyDeviceToHost, s));
            CK(cudaStreamSynchronize(s));
            float ms; CK(cudaEventElapsedTime(&ms, a, b));
            gbs[vi][zi] = nbad ? -1.0 : (double)len * iters / (ms * 1e-3) / 1e9;
        }
    }
    // Table: variants as rows, sizes as columns, GB/s and / CE; the best variant by its worst ratio over sizes.
    printf("%-22s", "variant \\ size MB");
    for (size_t z : sizes) printf(" %7zu", z >> 20);
    printf(" | worst/CE\n");
    int best = -1; double best_worst = 0;
    for (size_t vi = 0; vi < vs.size(); vi++) {
        printf("%-22s", vs[vi].name.c_str());
        double worst = 1e9;
        for (size_t zi = 0; zi < sizes.size(); zi++) {
            printf(" %7.1f", gbs[vi][zi]);
            worst = std::min(worst, gbs[vi][zi] / gbs[0][zi]);
        }
        printf(" | %.3f\n", worst);
        if (vi > 0 && worst > best_worst) { best_worst = worst; best = (int)vi; }
    }
    printf("# best by worst ratio: %s (%.3f); -1.0 = a byte wrong\n", vs[best].name.c_str(), best_worst);
    return 0;
}
