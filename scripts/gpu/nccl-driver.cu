// efatop's NCCL driver: a small NCCL program that sweeps collectives and times them as nccl-tests does
// (warm-up calls, then ITERS calls launched back to back on one stream, the host's clock around them and
// the stream's synchronize; time = elapsed / ITERS; algbw = size / time; busbw by nccl-tests' factors).
//
//   nccl-driver [--ranks N] [--min BYTES] [--max BYTES] [--iters N] [--warmup N] [--colls LIST]
//               [--same-gpu] [--stall-rank R --stall-at N [--stall-s S]]
//
// One rank on GPU 0 by default; --ranks N starts N processes (this program again, one per GPU) that share
// an NCCL id.
// --same-gpu puts every rank on GPU 0, each with its own NCCL_HOSTID (efatop-r<rank>, set before
// ncclCommInitRank): NCCL then takes the ranks for processes on different hosts (it refuses two ranks on one
// GPU only when their host hashes match, and NCCL_HOSTID is what it hashes), so with NCCL_SOCKET_IFNAME=lo
// and NCCL_IB_DISABLE=1 they talk over NCCL's network path (the socket transport, its proxy) on one GPU.
// The processes time-slice the GPU: slow, but the plugin and the driver time the same calls.
// --stall-rank R --stall-at N: rank R sleeps S seconds (--stall-s, default 8) before its N-th call (1-based,
// warm-up calls included, counted over the whole sweep), so that its peers wait in that call: the hang
// locator's case with a real NCCL.
// Each rank prints one line per collective and size:
//   driver rank=R nranks=N coll=allreduce size=BYTES count=C type=float time_us=T algbw=A busbw=B calls=K all_us=U
// (size as nccl-tests names it: the buffer of allreduce and broadcast, the gathered buffer of allgather, the
// scattered buffer of reducescatter, what one rank sends in all of alltoall and to its next rank in
// sendrecv; calls = warm-up + timed; all_us the mean over every call, each warm-up call timed alone, which
// is what a profiler that folds every call sees). alltoall is a group of ncclSend/ncclRecv, one pair per
// peer (itself included), as nccl-tests' alltoall runs it, so a one-rank communicator runs a kernel too;
// sendrecv one pair, to the next rank and from the previous one, as nccl-tests' sendrecv; broadcast's root
// is rank 0.
// Built by scripts/gpu/nccl-watch-check: nvcc -O2 -o nccl-driver nccl-driver.cu -lnccl

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#define CUDA(call)                                                                                      \
  do {                                                                                                  \
    cudaError_t e_ = (call);                                                                            \
    if (e_ != cudaSuccess) {                                                                            \
      fprintf(stderr, "nccl-driver: %s: %s\n", #call, cudaGetErrorString(e_));                          \
      exit(1);                                                                                          \
    }                                                                                                   \
  } while (0)
#define NCCL(call)                                                                                      \
  do {                                                                                                  \
    ncclResult_t r_ = (call);                                                                           \
    if (r_ != ncclSuccess) {                                                                            \
      fprintf(stderr, "nccl-driver: %s: %s\n", #call, ncclGetErrorString(r_));                          \
      exit(1);                                                                                          \
    }                                                                                                   \
  } while (0)

struct Options {
  int ranks = 1, rank = -1, iters = 20, warmup = 5, stall_rank = -1, stall_at = 0, stall_s = 8;
  bool same_gpu = false;
  size_t min = 1 << 20, max = (size_t)1 << 30;
  std::string colls = "allreduce,allgather,alltoall", id;  // or reducescatter, broadcast, sendrecv
};

static void usage_exit(const char* what) {
  fprintf(stderr, "nccl-driver: %s\nusage: nccl-driver [--ranks 1..8] [--min BYTES] [--max BYTES] [--iters 1..10000] "
                  "[--warmup 0..1000] [--colls allreduce,allgather,reducescatter,broadcast,alltoall,sendrecv] [--same-gpu] "
                  "[--stall-rank 0..7 --stall-at 1..1000000 [--stall-s 1..600]]\n", what);
  exit(2);
}

static long number(const char* flag, const char* value, long lo, long hi) {
  char* end = nullptr;
  long v = strtol(value, &end, 10);
  if (!*value || *end || v < lo || v > hi) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s %s: a whole number from %ld to %ld", flag, value, lo, hi);
    usage_exit(msg);
  }
  return v;
}

static std::string hex(const ncclUniqueId& id) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < sizeof id.internal; i++) {
    snprintf(b, sizeof b, "%02x", (unsigned char)id.internal[i]);
    s += b;
  }
  return s;
}

static ncclUniqueId unhex(const std::string& s) {
  ncclUniqueId id;
  if (s.size() != 2 * sizeof id.internal) usage_exit("--id: not an NCCL id");
  for (size_t i = 0; i < sizeof id.internal; i++) id.internal[i] = (char)strtol(s.substr(2 * i, 2).c_str(), nullptr, 16);
  return id;
}

// One call of `coll` over `bytes` (nccl-tests' size), on `comm`.
static void launch(const std::string& coll, size_t bytes, int nranks, void* send, void* recv, ncclComm_t comm, cudaStream_t s) {
  if (coll == "allreduce") {
    NCCL(ncclAllReduce(send, recv, bytes / sizeof(float), ncclFloat, ncclSum, comm, s));
  } else if (coll == "allgather") {
    NCCL(ncclAllGather(send, recv, bytes / nranks / sizeof(float), ncclFloat, comm, s));
  } else if (coll == "reducescatter") {
    NCCL(ncclReduceScatter(send, recv, bytes / nranks / sizeof(float), ncclFloat, ncclSum, comm, s));
  } else if (coll == "broadcast") {
    NCCL(ncclBroadcast(send, recv, bytes / sizeof(float), ncclFloat, 0, comm, s));
  } else if (coll == "sendrecv") {
    int rank = 0;
    NCCL(ncclCommUserRank(comm, &rank));
    NCCL(ncclGroupStart());
    NCCL(ncclSend(send, bytes / sizeof(float), ncclFloat, (rank + 1) % nranks, comm, s));
    NCCL(ncclRecv(recv, bytes / sizeof(float), ncclFloat, (rank + nranks - 1) % nranks, comm, s));
    NCCL(ncclGroupEnd());
  } else {
    size_t per_peer = bytes / nranks;
    NCCL(ncclGroupStart());
    for (int p = 0; p < nranks; p++) {
      NCCL(ncclSend((char*)send + p * per_peer, per_peer / sizeof(float), ncclFloat, p, comm, s));
      NCCL(ncclRecv((char*)recv + p * per_peer, per_peer / sizeof(float), ncclFloat, p, comm, s));
    }
    NCCL(ncclGroupEnd());
  }
}

// nccl-tests' busbw factors.
static double bus_factor(const std::string& coll, int n) {
  if (coll == "allreduce") return 2.0 * (n - 1) / n;
  if (coll == "broadcast" || coll == "sendrecv") return 1.0;
  return (double)(n - 1) / n;  // allgather, reducescatter, alltoall
}

// The elements a call of `coll` over `size` bytes names (per rank where nccl-tests counts so).
static size_t element_count(const std::string& coll, size_t size, int n) {
  if (coll == "allreduce" || coll == "broadcast" || coll == "sendrecv") return size / sizeof(float);
  return size / n / sizeof(float);
}

static int run_rank(const Options& o) {
  if (o.same_gpu) {
    // Before any NCCL call: NCCL hashes NCCL_HOSTID once, on first use.
    std::string hostid = "efatop-r" + std::to_string(o.rank);
    setenv("NCCL_HOSTID", hostid.c_str(), 1);
  }
  CUDA(cudaSetDevice(o.same_gpu ? 0 : o.rank));
  ncclUniqueId id = unhex(o.id);
  ncclComm_t comm;
  NCCL(ncclCommInitRank(&comm, o.ranks, id, o.rank));
  cudaStream_t s;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void *send, *recv;
  CUDA(cudaMalloc(&send, o.max));
  CUDA(cudaMalloc(&recv, o.max));
  CUDA(cudaMemset(send, 1, o.max));
  CUDA(cudaMemset(recv, 0, o.max));
  CUDA(cudaDeviceSynchronize());
  int version = 0;
  NCCL(ncclGetVersion(&version));
  if (o.rank == 0) printf("driver nccl=%d ranks=%d iters=%d warmup=%d same_gpu=%d\n", version, o.ranks, o.iters, o.warmup, o.same_gpu ? 1 : 0);
  long calls = 0;
  // Every launch goes through here: the stall comes before the N-th.
  auto call = [&](const std::string& coll, size_t size) {
    if (++calls == o.stall_at && o.rank == o.stall_rank) {
      printf("driver rank=%d stall before call=%ld coll=%s size=%zu seconds=%d\n", o.rank, calls, coll.c_str(), size, o.stall_s);
      fflush(stdout);
      sleep(o.stall_s);
    }
    launch(coll, size, o.ranks, send, recv, comm, s);
  };
  std::string list = o.colls + ",";
  for (size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1) {
    std::string coll = list.substr(at, comma - at);
    for (size_t bytes = o.min; bytes <= o.max; bytes *= 2) {
      // nccl-tests' sizes: a whole number of elements per rank.
      size_t size = bytes / (sizeof(float) * o.ranks) * sizeof(float) * o.ranks;
      // Each warm-up call timed alone (launch to the stream's synchronize), for the mean over every call.
      double warm = 0;
      for (int i = 0; i < o.warmup; i++) {
        auto w0 = std::chrono::steady_clock::now();
        call(coll, size);
        CUDA(cudaStreamSynchronize(s));
        warm += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      }
      CUDA(cudaStreamSynchronize(s));
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < o.iters; i++) call(coll, size);
      CUDA(cudaStreamSynchronize(s));
      double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double secs = total / o.iters;
      double all = (warm + total) / (o.warmup + o.iters);
      double algbw = size / secs / 1e9;
      size_t count = element_count(coll, size, o.ranks);
      printf("driver rank=%d nranks=%d coll=%s size=%zu count=%zu type=float time_us=%.2f algbw=%.3f busbw=%.3f calls=%d all_us=%.2f\n",
             o.rank, o.ranks, coll.c_str(), size, count, secs * 1e6, algbw, algbw * bus_factor(coll, o.ranks), o.warmup + o.iters,
             all * 1e6);
      fflush(stdout);
    }
  }
  CUDA(cudaFree(send));
  CUDA(cudaFree(recv));
  NCCL(ncclCommDestroy(comm));
  return 0;
}

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--same-gpu") { o.same_gpu = true; continue; }
    if (i + 1 >= argc) usage_exit((a + ": needs a value").c_str());
    const char* v = argv[++i];
    if (a == "--ranks") o.ranks = number("--ranks", v, 1, 8);
    else if (a == "--rank") o.rank = number("--rank", v, 0, 7);
    else if (a == "--min") o.min = number("--min", v, 4096, 1L << 34);
    else if (a == "--max") o.max = number("--max", v, 4096, 1L << 34);
    else if (a == "--iters") o.iters = number("--iters", v, 1, 10000);
    else if (a == "--warmup") o.warmup = number("--warmup", v, 0, 1000);
    else if (a == "--colls") o.colls = v;
    else if (a == "--id") o.id = v;
    else if (a == "--stall-rank") o.stall_rank = number("--stall-rank", v, 0, 7);
    else if (a == "--stall-at") o.stall_at = number("--stall-at", v, 1, 1000000);
    else if (a == "--stall-s") o.stall_s = number("--stall-s", v, 1, 600);
    else usage_exit(("unknown flag " + a).c_str());
  }
  if (o.min > o.max) usage_exit("--min is above --max");
  if ((o.stall_rank >= 0) != (o.stall_at > 0)) usage_exit("--stall-rank and --stall-at: give both or neither");
  if (o.stall_rank >= o.ranks) usage_exit("--stall-rank: a rank below --ranks");
  {
    std::string list = o.colls + ",";
    for (size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1) {
      std::string c = list.substr(at, comma - at);
      if (c != "allreduce" && c != "allgather" && c != "reducescatter" && c != "broadcast" && c != "alltoall" && c != "sendrecv")
        usage_exit(("--colls " + o.colls + ": a list of allreduce, allgather, reducescatter, broadcast, alltoall, sendrecv").c_str());
    }
  }
  if (o.rank >= 0) return run_rank(o);
  // The parent: one NCCL id, a process per rank (this program again), their exit statuses.
  ncclUniqueId id;
  NCCL(ncclGetUniqueId(&id));
  std::string idhex = hex(id);
  std::vector<pid_t> children;
  for (int r = 0; r < o.ranks; r++) {
    pid_t pid = fork();
    if (pid < 0) { perror("nccl-driver: fork"); return 1; }
    if (pid == 0) {
      std::vector<std::string> args;
      for (int i = 0; i < argc; i++) args.push_back(argv[i]);
      args.push_back("--rank"); args.push_back(std::to_string(r));
      args.push_back("--id"); args.push_back(idhex);
      std::vector<char*> cargs;
      for (auto& s : args) cargs.push_back(&s[0]);
      cargs.push_back(nullptr);
      execv("/proc/self/exe", cargs.data());
      perror("nccl-driver: exec");
      _exit(1);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed;
}
