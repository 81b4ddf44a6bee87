// Does a CUDA IPC mapping of a buffer of the same GPU (what `ipc --same-gpu` writes into) slow the store
// kernels more than the copy engine? The parent allocates the target and exports it; a child process maps
// it (cudaIpcOpenMemHandle) and measures, in one table, each mover into its own buffer (local) and into the
// mapped one (ipc). Build beside ipc-variants.cu: nvcc -O3 -arch=sm_90 -o /tmp/m ipc-mapped.cu && /tmp/m
#define IPC_VARIANTS_NO_MAIN
#include "ipc-variants.cu"
#include <unistd.h>
#include <sys/wait.h>

static int child(const char* hex) {
    cudaIpcMemHandle_t handle;
    for (int i = 0; i < (int)sizeof(handle); i++) sscanf(hex + 2 * i, "%2hhx", &((unsigned char*)&handle)[i]);
    int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t maxlen = 1ull << 30;
    uint4 *src, *local, *mapped; unsigned long long* bad;
    CK(cudaMalloc(&src, maxlen)); CK(cudaMalloc(&local, maxlen)); CK(cudaMalloc(&bad, 8));
    CK(cudaIpcOpenMemHandle((void**)&mapped, handle, cudaIpcMemLazyEnablePeerAccess));
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<Variant> vs;
    vs.push_back({"CE", nullptr, 0, 0, true});
    vs.push_back({"seed 128x256", seed, 128, 256, false});
    V("t8", (tiled<8, 0, 0, 512, 2>), 512, 2);
    V("t8.cs", (tiled<8, 1, 0, 512, 2>), 512, 2);
    V("t8.cs", (tiled<8, 1, 0, 1024, 1>), 1024, 1);
    V("t8.cs", (tiled<8, 1, 0, 256, 2>), 256, 2);
    V("t8.256B", (tiled<8, 3, 0, 256, 2>), 256, 2);
    BULK(8, 16384, 1); BULK(4, 16384, 3);
    const int warmup = 3, iters = 20, rounds = 3;
    std::vector<size_t> sizes;
    for (size_t z = 64ull << 20; z <= maxlen; z <<= 1) sizes.push_back(z);
    uint4* targets[2] = {local, mapped};
    const char* where[2] = {"local", "ipc"};
    std::vector<double> gbs(vs.size() * 2 * sizes.size());
    cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    unsigned int key = 1;
    for (size_t zi = 0; zi < sizes.size(); zi++) {
        const size_t len = sizes[zi];
        std::vector<std::vector<double>> all(vs.size() * 2);
        for (int round = 0; round < rounds; round++)
            for (size_t vi = 0; vi < vs.size(); vi++)
                for (int w = 0; w < 2; w++) {
                    Variant& v = vs[vi];
                    uint4* dst = targets[w];
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
                    all[vi * 2 + w].push_back(nbad ? -1.0 : (double)len * iters / (ms * 1e-3) / 1e9);
                }
        for (size_t k = 0; k < all.size(); k++) {
            std::sort(all[k].begin(), all[k].end());
            gbs[k * sizes.size() + zi] = all[k][0] < 0 ? -1.0 : all[k][all[k].size() / 2];
        }
    }
    printf("# GB/s into this process's buffer (local) and into the parent's, mapped by CUDA IPC (ipc); median of %d rounds\n", rounds);
    printf("%-22s %-5s", "mover", "into");
    for (size_t z : sizes) printf(" %7zu", z >> 20);
    printf(" | /CE per size\n");
    for (size_t vi = 0; vi < vs.size(); vi++)
        for (int w = 0; w < 2; w++) {
            printf("%-22s %-5s", vs[vi].name.c_str(), where[w]);
            for (size_t zi = 0; zi < sizes.size(); zi++) printf(" %7.1f", gbs[(vi * 2 + w) * sizes.size() + zi]);
            printf(" |");
            for (size_t zi = 0; zi < sizes.size(); zi++) printf(" %5.3f", gbs[(vi * 2 + w) * sizes.size() + zi] / gbs[(0 * 2 + w) * sizes.size() + zi]);
            printf("\n");
        }
    CK(cudaIpcCloseMemHandle(mapped));
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 3 && std::string(argv[1]) == "child") return child(argv[2]);
    void* target; CK(cudaMalloc(&target, 1ull << 30));
    cudaIpcMemHandle_t handle; CK(cudaIpcGetMemHandle(&handle, target));
    char hex[2 * sizeof(handle) + 1];
    for (int i = 0; i < (int)sizeof(handle); i++) sprintf(hex + 2 * i, "%02x", ((unsigned char*)&handle)[i]);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { execl(argv[0], argv[0], "child", hex, (char*)nullptr); _exit(127); }
    int status = 0; waitpid(pid, &status, 0);
    CK(cudaFree(target));
    return WEXITSTATUS(status);
}
