// Store-kernel variants against the copy engine, one GPU, device-to-device (what `ipc --same-gpu` moves):
// the exploration behind `kernel (tuned)` in transports/cuda/src/ipc.rs. Build and run on the GPU
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
__device__ __forceinline__ uint4 load_256(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 load_ef(const uint4* p, unsigned long long policy) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy));
    return v;
}
__device__ __forceinline__ uint4 load_nc(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// Block tiles: tile t is U * blockDim contiguous vectors, tiles dealt to blocks round-robin (CHUNKED: each
// block takes one contiguous run of tiles instead).
// MODE 0 plain, 1 streaming (ldcs/stcs), 2 nc no-allocate loads, 3 nc + L2::256B prefetch, 4 nc + L2 evict_first.
// FENCE 0 none, 1 one __threadfence_system per block (after a barrier), 2 one per thread (the seed's).
template <int U, int MODE, int FENCE, int B, int K, bool CHUNKED = false>
__global__ void __launch_bounds__(B, K) tiled(const uint4* __restrict__ source, uint4* __restrict__ target, unsigned long long vectors) {
    const unsigned long long tile = (unsigned long long)U * blockDim.x;
    const unsigned long long tiles = vectors / tile;
    unsigned long long policy = 0;
    if (MODE == 4) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    unsigned long long t = blockIdx.x, end = tiles, step = gridDim.x;
    if (CHUNKED) { t = tiles * blockIdx.x / gridDim.x; end = tiles * (blockIdx.x + 1) / gridDim.x; step = 1; }
    for (; t < end; t += step) {
        const unsigned long long base = t * tile + threadIdx.x;
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint4* p = source + base + (unsigned long long)u * blockDim.x;
            v[u] = MODE == 1 ? load_cs(p) : MODE == 2 ? load_nc(p) : MODE == 3 ? load_256(p) : MODE == 4 ? load_ef(p, policy) : *p;
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
    if (FENCE == 2) __threadfence_system();
    if (FENCE == 1) { __syncthreads(); if (threadIdx.x == 0) __threadfence_system(); }
}

// Hopper bulk copies: one thread per block moves CHUNK-byte pieces global -> shared -> global through
// STAGES shared-memory stages, each load completing on an mbarrier (sizes here are whole pieces). A stage is
// loaded again once the store LAG pieces back has read it (LAG 1: each store's own, as the product kernel
// waits). Pieces are dealt round-robin, every gridDim.x-th to a block, or with CHUNKED one contiguous run
// of them a block.
template <int STAGES, int CHUNK, int LAG = 1, bool CHUNKED = false>
__global__ void __launch_bounds__(32, 1) bulk(const uint4* source, uint4* target, unsigned long long vectors) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) unsigned long long bar[STAGES];
    if (threadIdx.x != 0) return;
    const unsigned char* src = (const unsigned char*)source;
    unsigned char* dst = (unsigned char*)target;
    const unsigned long long chunks = vectors * 16 / CHUNK;
    const unsigned long long per = (chunks + gridDim.x - 1) / gridDim.x;
    const unsigned long long mine = CHUNKED ? (chunks > blockIdx.x * per ? min(per, chunks - blockIdx.x * per) : 0)
                                            : (chunks > blockIdx.x ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0);
    auto piece = [&](unsigned long long i) { return CHUNKED ? blockIdx.x * per + i : blockIdx.x + i * gridDim.x; };
    const unsigned smem0 = (unsigned)__cvta_generic_to_shared(smem);
    const unsigned bar0 = (unsigned)__cvta_generic_to_shared(bar);
    for (int s = 0; s < STAGES; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar0 + 8 * s) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    auto load = [&](unsigned long long i) {
        const int s = (int)(i % STAGES);
        unsigned long long state;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;" : "=l"(state) : "r"(bar0 + 8 * s), "r"(CHUNK) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(smem0 + s * CHUNK), "l"(src + piece(i) * CHUNK), "r"(CHUNK), "r"(bar0 + 8 * s) : "memory");
    };
    for (unsigned long long i = 0; i < mine && i < STAGES; i++) load(i);
    for (unsigned long long i = 0; i < mine; i++) {
        const int s = (int)(i % STAGES);
        const unsigned parity = (unsigned)((i / STAGES) & 1);
        unsigned done = 0;
        while (!done) {
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done) : "r"(bar0 + 8 * s), "r"(parity) : "memory");
        }
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(dst + piece(i) * CHUNK), "r"(smem0 + s * CHUNK), "r"(CHUNK) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        // Store j = i - LAG + 1 has read its stage once at most LAG - 1 newer groups are still reading.
        if (i + 1 >= LAG && i + 1 - LAG + STAGES < mine) {
            asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(LAG - 1) : "memory");
            load(i + 1 - LAG + STAGES);
        }
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
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

struct Variant { std::string name; Kernel k; int grid; int block; bool ce; int smem = 0; };

__global__ void fill(unsigned int* p, unsigned long long n, unsigned int key) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x)
        p[i] = (unsigned int)(i * 2654435761u) ^ key;
}
__global__ void check(const unsigned int* p, unsigned long long n, unsigned int key, unsigned long long* bad) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x)
        if (p[i] != ((unsigned int)(i * 2654435761u) ^ key)) atomicAdd(bad, 1ULL);
}

// The variant lists: `vs` and `sms` in scope.
// Launch bounds = the launched shape (K blocks of B per SM), so registers allow all U loads in flight.
#define V(label, kernel, B, K) do { char n[64]; snprintf(n, 64, "%s %dx%d", label, (K) * sms, B); \
        vs.push_back({n, kernel, (K) * sms, B, false}); } while (0)
#define BULK(S, C, K, L, CH) do { char n[64]; snprintf(n, 64, "bulk %dx%dK %dx32", S, (C) >> 10, (K) * sms); \
        std::string name = std::string(n) + ((L) > 1 ? " lag" + std::to_string(L) : "") + ((CH) ? " chunked" : ""); \
        CK(cudaFuncSetAttribute(bulk<S, C, L, CH>, cudaFuncAttributeMaxDynamicSharedMemorySize, (S) * (C))); \
        vs.push_back({name, bulk<S, C, L, CH>, (K) * sms, 32, false, (S) * (C)}); } while (0)

#ifndef IPC_VARIANTS_NO_MAIN
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
#define SHAPE(B, K) \
    V("t8", (tiled<8, 0, 0, B, K>), B, K); \
    V("t8.256B", (tiled<8, 3, 0, B, K>), B, K); \
    V("t8.evictfirst", (tiled<8, 4, 0, B, K>), B, K); \
    V("t8.cs", (tiled<8, 1, 0, B, K>), B, K); \
    V("t8.chunked", (tiled<8, 0, 0, B, K, true>), B, K); \
    V("t8.256B.chunked", (tiled<8, 3, 0, B, K, true>), B, K);
    SHAPE(512, 2) SHAPE(1024, 1) SHAPE(256, 2) SHAPE(512, 1) SHAPE(512, 3) SHAPE(256, 4)
    V("t8.fence-block", (tiled<8, 0, 1, 512, 2>), 512, 2);
    V("t8.fence-thread", (tiled<8, 0, 2, 512, 2>), 512, 2);
    V("t16", (tiled<16, 0, 0, 256, 2>), 256, 2);
    V("t16.256B", (tiled<16, 3, 0, 256, 2>), 256, 2);
    V("t4", (tiled<4, 0, 0, 512, 4>), 512, 4);
    V("t4.256B", (tiled<4, 3, 0, 512, 4>), 512, 4);
    BULK(4, 16384, 3, 1, false); BULK(4, 32768, 1, 1, false); BULK(8, 16384, 1, 1, false); BULK(2, 32768, 3, 1, false);
    BULK(3, 16384, 4, 1, false); BULK(6, 32768, 1, 1, false); BULK(4, 8192, 6, 1, false);
    BULK(8, 16384, 1, 2, false); BULK(8, 16384, 1, 4, false); BULK(12, 16384, 1, 4, false); BULK(13, 16384, 1, 6, false);
    BULK(6, 32768, 1, 2, false); BULK(6, 32768, 1, 3, false); BULK(8, 16384, 1, 1, true); BULK(8, 16384, 1, 4, true);
    BULK(12, 16384, 1, 4, true);
    const int warmup = 3, iters = 20;
    std::vector<size_t> sizes;
    for (size_t z = 8ull << 20; z <= maxlen; z <<= 1) sizes.push_back(z);
    const int rounds = 3;  // every variant measured 3 times per size, interleaved; the median is kept
    std::vector<std::vector<std::vector<double>>> all(vs.size(), std::vector<std::vector<double>>(sizes.size()));
    std::vector<std::vector<double>> gbs(vs.size(), std::vector<double>(sizes.size()));
    cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    unsigned int key = 1;
    for (size_t zi = 0; zi < sizes.size(); zi++) for (int round = 0; round < rounds; round++) {
        size_t len = sizes[zi];
        for (size_t vi = 0; vi < vs.size(); vi++) {
            Variant& v = vs[vi];
            key++;
            fill<<<1024, 256, 0, s>>>((unsigned int*)src, len / 4, key);
            fill<<<1024, 256, 0, s>>>((unsigned int*)dst, len / 4, ~key);
            auto pass = [&]() {
                if (v.ce) CK(cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToDevice, s));
                else v.k<<<v.grid, v.block, v.smem, s>>>(src, dst, len / 16);
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
            all[vi][zi].push_back(nbad ? -1.0 : (double)len * iters / (ms * 1e-3) / 1e9);
            if (round == rounds - 1) {
                std::vector<double> r = all[vi][zi];
                std::sort(r.begin(), r.end());
                gbs[vi][zi] = *std::min_element(r.begin(), r.end()) < 0 ? -1.0 : r[r.size() / 2];
            }
        }
    }
    // Table: variants as rows, sizes as columns, GB/s and / CE; the best variant by its worst ratio over sizes.
    printf("# GB/s (bytes copied per second), median of %d interleaved rounds of %d passes after %d warm-up\n", rounds, iters, warmup);
    printf("%-26s", "variant \\ size MB");
    for (size_t z : sizes) printf(" %7zu", z >> 20);
    printf(" | worst/CE\n");
    int best = -1; double best_worst = 0;
    for (size_t vi = 0; vi < vs.size(); vi++) {
        printf("%-26s", vs[vi].name.c_str());
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
#endif
