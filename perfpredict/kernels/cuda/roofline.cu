// perfpredict-roofline: the native CUDA C++ roofline suite. Same kernels as the CuPy path
// (roofline_kernels.cuh), same protocol (warm-up, reps timed with CUDA events, min/median/max), and the same
// DeviceCeilings JSON shape on stdout. `perfpredict roofline --native ./perfpredict-roofline` adds datasheet
// fractions and clocks. Usage: perfpredict-roofline [--quick] [--reps N] [--kernels a,b,c]
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
#ifdef PERFPREDICT_HAVE_CUBLAS
#include <cublas_v2.h>
#endif
#include "roofline_kernels.cuh"

#define CHECK(x)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "perfpredict-roofline: %s: %s\n", #x, cudaGetErrorString(e_));         \
      std::exit(2);                                                                               \
    }                                                                                             \
  } while (0)

namespace {
constexpr int kBlock = 256;
struct Options { bool quick = false; int reps = 20; std::vector<std::string> kernels; };
struct Dev { int sms, cc_major, cc_minor, l2, max_threads_sm, bus_bits, clock_khz, mem_clock_khz; char name[256]; };
struct Result { std::string kernel, ceiling, unit; double work; std::vector<double> times; bool ok; std::string method; };

bool wanted(const Options& o, const std::string& name) {
  if (o.kernels.empty()) return true;
  for (auto& k : o.kernels) if (name.rfind(k, 0) == 0) return true;
  return false;
}

std::vector<double> time_events(const std::function<void()>& launch, int reps, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) launch();
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t s, e;
  CHECK(cudaEventCreate(&s));
  CHECK(cudaEventCreate(&e));
  std::vector<double> out;
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(s));
    launch();
    CHECK(cudaEventRecord(e));
    CHECK(cudaEventSynchronize(e));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, s, e));
    out.push_back(ms * 1e-3);
  }
  CHECK(cudaGetLastError());
  cudaEventDestroy(s);
  cudaEventDestroy(e);
  return out;
}

template <typename T>
Result fma_bench(const char* kernel, const char* ceiling, void (*k)(T*, int, T, T, int), T a, T b, int flops_per,
                 const Dev& d, const Options& o) {
  const int grid = d.sms * (d.max_threads_sm / kBlock) * 4;
  T* out;
  CHECK(cudaMalloc(&out, sizeof(T) * grid * kBlock));
  k<<<grid, kBlock>>>(out, 1, a, b, 1);
  CHECK(cudaDeviceSynchronize());
  int iters = o.quick ? 256 : 2048;
  auto t = time_events([&] { k<<<grid, kBlock>>>(out, iters, a, b, 0); }, o.reps);
  CHECK(cudaFree(out));
  double fmas = double(grid) * kBlock * iters * PP_CHAINS * PP_UNROLL;
  return {kernel, ceiling, "FLOP/s", fmas * flops_per, t, true, "native FMA chains, CUDA events"};
}

std::vector<Result> memory_benches(const Dev& d, const Options& o) {
  std::vector<Result> r;
  size_t n = std::max<size_t>(size_t(4) * d.l2, size_t(o.quick ? 256 : 1024) << 20) / 4;
  n -= n % 4;
  long long n4 = n / 4;
  float *a, *b, *c, *out;
  CHECK(cudaMalloc(&a, n * 4));
  CHECK(cudaMalloc(&b, n * 4));
  CHECK(cudaMalloc(&c, n * 4));
  CHECK(cudaMalloc(&out, 4));
  const int grid = d.sms * (d.max_threads_sm / kBlock) * 2;
  pp_write_v4<<<grid, kBlock>>>((float4*)a, n4, 1.f);
  pp_write_v4<<<grid, kBlock>>>((float4*)b, n4, 2.f);
  pp_write_v4<<<grid, kBlock>>>((float4*)c, n4, 3.f);
  std::string m = "float4 grid-stride, " + std::to_string(n * 4 >> 20) + " MiB arrays";
  if (wanted(o, "hbm_read"))
    r.push_back({"hbm_read", "hbm_read_bandwidth_bytes_per_s", "B/s", double(n) * 4,
                 time_events([&] { pp_read_v4<<<grid, kBlock>>>((const float4*)a, n4, out, 0); }, o.reps), true, m});
  if (wanted(o, "hbm_copy"))
    r.push_back({"hbm_copy", "hbm_copy_bandwidth_bytes_per_s", "B/s", double(n) * 8,
                 time_events([&] { pp_copy_v4<<<grid, kBlock>>>((const float4*)b, (float4*)c, n4); }, o.reps), true, m});
  if (wanted(o, "hbm_triad")) {
    auto t = time_events([&] { pp_triad_v4<<<grid, kBlock>>>((float4*)a, (const float4*)b, (const float4*)c, n4, 3.f); }, o.reps);
    float h = 0;
    CHECK(cudaMemcpy(&h, a + n - 1, 4, cudaMemcpyDeviceToHost));
    r.push_back({"hbm_triad", "hbm_triad_bandwidth_bytes_per_s", "B/s", double(n) * 12, t, h == 2.f + 3.f * 2.f, m});
  }
  if (wanted(o, "hbm_write"))
    r.push_back({"hbm_write", "hbm_write_bandwidth_bytes_per_s", "B/s", double(n) * 4,
                 time_events([&] { pp_write_v4<<<grid, kBlock>>>((float4*)a, n4, 5.f); }, o.reps), true, m});
  if (wanted(o, "l2_read")) {
    long long l2n4 = (long long)(d.l2 / 2) / 16;
    int passes = std::max(1, int((2LL << 30) / (l2n4 * 16)));
    r.push_back({"l2_read", "l2_bandwidth_bytes_per_s", "B/s", double(l2n4) * 16 * passes,
                 time_events([&] { pp_l2_read_v4<<<d.sms * 64, kBlock>>>((const float4*)a, l2n4, passes, out, 0); }, o.reps),
                 true, "working set L2/2, .cg float4 re-reads"});
  }
  if (wanted(o, "l1_read")) {
    int passes = o.quick ? 2000 : 20000;
    r.push_back({"l1_read", "l1_bandwidth_bytes_per_s", "B/s", double(d.sms) * 16384 * passes,
                 time_events([&] { pp_l1_read_v4<<<d.sms, 512>>>((const float4*)a, 1024, passes, out, 0); }, o.reps),
                 true, "one block per SM re-reading 16 KiB, float4 .ca"});
  }
  if (wanted(o, "shared_read")) {
    int passes = o.quick ? 2000 : 20000;
    r.push_back({"shared_read", "shared_bandwidth_bytes_per_s", "B/s", double(d.sms) * 2048 * 16 * passes,
                 time_events([&] { pp_shared_read_v4<<<d.sms, 1024>>>(passes, out, 0); }, o.reps), true,
                 "one block per SM, conflict-free float4 shared reads"});
  }
  cudaFree(a); cudaFree(b); cudaFree(c); cudaFree(out);
  return r;
}

std::vector<Result> transfer_and_launch(const Options& o) {
  std::vector<Result> r;
  size_t bytes = size_t(o.quick ? 256 : 1024) << 20;
  void *host, *dev;
  CHECK(cudaMallocHost(&host, bytes));
  CHECK(cudaMalloc(&dev, bytes));
  std::memset(host, 7, bytes);
  int reps = std::max(5, o.reps / 2);
  if (wanted(o, "pcie_h2d"))
    r.push_back({"pcie_h2d", "pcie_h2d_bandwidth_bytes_per_s", "B/s", double(bytes),
                 time_events([&] { CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice)); }, reps), true,
                 "pinned cudaMemcpyAsync"});
  if (wanted(o, "pcie_d2h"))
    r.push_back({"pcie_d2h", "pcie_d2h_bandwidth_bytes_per_s", "B/s", double(bytes),
                 time_events([&] { CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost)); }, reps), true,
                 "pinned cudaMemcpyAsync"});
  cudaFreeHost(host);
  cudaFree(dev);
  const int n = o.quick ? 2000 : 10000;
  if (wanted(o, "launch_back_to_back")) {
    auto t = time_events([&] { for (int i = 0; i < n; ++i) pp_empty<<<1, 1>>>(0); }, o.reps);
    for (auto& x : t) x /= n;
    r.push_back({"launch_back_to_back", "launch_overhead_s", "s", 1, t, true, "empty kernels back to back / N"});
  }
  if (wanted(o, "launch_graph")) {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < n; ++i) pp_empty<<<1, 1, 0, s>>>(0);
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    auto t = time_events([&] { CHECK(cudaGraphLaunch(ge, 0)); }, o.reps);
    for (auto& x : t) x /= n;
    r.push_back({"launch_graph", "launch_overhead_graph_s", "s", 1, t, true, "N empty kernels in one CUDA graph / N"});
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
  }
  return r;
}

#ifdef PERFPREDICT_HAVE_CUBLAS
std::vector<Result> gemm_benches(const Options& o) {
  std::vector<Result> r;
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return r;
  struct G { const char* kernel; const char* ceiling; cudaDataType t; cublasComputeType_t c; int bytes; };
  G gs[] = {{"gemm_fp16", "fp16_tensor_flops_per_s", CUDA_R_16F, CUBLAS_COMPUTE_32F, 2},
            {"gemm_bf16", "bf16_tensor_flops_per_s", CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2},
            {"gemm_tf32", "tf32_tensor_flops_per_s", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4}};
  const int sizes[] = {4096, 8192};
  for (auto& g : gs) {
    if (!wanted(o, g.kernel)) continue;
    Result best{g.kernel, g.ceiling, "FLOP/s", 0, {}, true, "cublasGemmEx, best of sizes"};
    double best_rate = 0;
    for (int s : sizes) {
      void *a, *b, *c;
      CHECK(cudaMalloc(&a, size_t(s) * s * g.bytes));
      CHECK(cudaMalloc(&b, size_t(s) * s * g.bytes));
      CHECK(cudaMalloc(&c, size_t(s) * s * g.bytes));
      CHECK(cudaMemset(a, 0, size_t(s) * s * g.bytes));
      CHECK(cudaMemset(b, 0, size_t(s) * s * g.bytes));
      float one = 1, zero = 0;
      auto t = time_events([&] {
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s, s, s, &one, a, g.t, s, b, g.t, s, &zero, c, g.t, s, g.c,
                     CUBLAS_GEMM_DEFAULT);
      }, o.reps);
      double work = 2.0 * s * s * s;
      double rate = work / *std::min_element(t.begin(), t.end());
      if (rate > best_rate) { best_rate = rate; best.work = work; best.times = t; }
      cudaFree(a); cudaFree(b); cudaFree(c);
    }
    r.push_back(best);
  }
  cublasDestroy(h);
  return r;
}
#endif

void print_stat_json(const Result& r, bool last) {
  std::vector<double> rates;
  for (double t : r.times) rates.push_back(r.unit == "s" ? t : r.work / t);
  std::sort(rates.begin(), rates.end());
  double mn = rates.front(), mx = rates.back();
  size_t n = rates.size();
  double med = n % 2 ? rates[n / 2] : 0.5 * (rates[n / 2 - 1] + rates[n / 2]);
  double spread = med > 0 ? (mx - mn) / med : 0;
  std::printf("  {\"kernel\": \"%s\", \"implementation\": \"native\", \"ceiling\": \"%s\", \"unit\": \"%s\", "
              "\"work\": %.17g, \"min\": %.17g, \"median\": %.17g, \"max\": %.17g, \"samples\": %zu, "
              "\"spread\": %.6f, \"spread_flagged\": %s, \"check_ok\": %s, \"method\": \"%s\", \"times_s\": [",
              r.kernel.c_str(), r.ceiling.c_str(), r.unit.c_str(), r.work, mn, med, mx, n, spread,
              spread > 0.05 ? "true" : "false", r.ok ? "true" : "false", r.method.c_str());
  for (size_t i = 0; i < r.times.size(); ++i) std::printf("%s%.9g", i ? ", " : "", r.times[i]);
  std::printf("]}%s\n", last ? "" : ",");
}
}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") { o.quick = true; o.reps = 10; }
    else if (a == "--reps" && i + 1 < argc) o.reps = std::max(3, std::atoi(argv[++i]));
    else if (a == "--kernels" && i + 1 < argc) {
      std::string s = argv[++i];
      for (size_t p = 0, q; p <= s.size(); p = q + 1) {
        q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        if (q > p) o.kernels.push_back(s.substr(p, q - p));
      }
    } else { std::fprintf(stderr, "usage: perfpredict-roofline [--quick] [--reps N] [--kernels a,b]\n"); return 2; }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "perfpredict-roofline: no CUDA device (driver missing or no GPU visible)\n");
    return 2;
  }
  Dev d{};
  cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, 0);
  cudaDeviceGetAttribute(&d.l2, cudaDevAttrL2CacheSize, 0);
  cudaDeviceGetAttribute(&d.max_threads_sm, cudaDevAttrMaxThreadsPerMultiProcessor, 0);
  cudaDeviceGetAttribute(&d.bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, 0);
  cudaDeviceGetAttribute(&d.mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, 0));
  std::snprintf(d.name, sizeof d.name, "%s", p.name);

  std::vector<Result> rs;
  if (wanted(o, "fp32_fma")) rs.push_back(fma_bench<float>("fp32_fma", "fp32_flops_per_s", pp_fp32_fma, 0.9999f, 1e-4f, 2, d, o));
  if (wanted(o, "fp64_fma")) rs.push_back(fma_bench<double>("fp64_fma", "fp64_flops_per_s", pp_fp64_fma, 0.9999, 1e-4, 2, d, o));
  if (wanted(o, "fp16_hfma2"))
    rs.push_back(fma_bench<__half2>("fp16_hfma2", "fp16_flops_per_s", pp_fp16_hfma2, __float2half2_rn(0.999f),
                                    __float2half2_rn(1e-3f), 4, d, o));
  if (wanted(o, "bf16_hfma2") && d.cc_major >= 8)
    rs.push_back(fma_bench<__nv_bfloat162>("bf16_hfma2", "bf16_flops_per_s", pp_bf16_hfma2,
                                           __float2bfloat162_rn(0.999f), __float2bfloat162_rn(1e-3f), 4, d, o));
  for (auto& r : memory_benches(d, o)) rs.push_back(r);
  for (auto& r : transfer_and_launch(o)) rs.push_back(r);
#ifdef PERFPREDICT_HAVE_CUBLAS
  for (auto& r : gemm_benches(o)) rs.push_back(r);
#endif
  std::printf("{\"schema\": \"perfpredict.device_ceilings/1\", \"target\": \"cuda\", \"implementation\": \"native\",\n"
              " \"device_name_reported\": \"%s\", \"device_attributes\": {\"cc\": \"%d.%d\", \"sms\": %d, "
              "\"l2_bytes\": %d, \"max_threads_per_sm\": %d, \"bus_width_bits\": %d, \"clock_khz\": %d, "
              "\"mem_clock_khz\": %d},\n \"quick\": %s, \"kernels\": [\n",
              d.name, d.cc_major, d.cc_minor, d.sms, d.l2, d.max_threads_sm, d.bus_bits, d.clock_khz,
              d.mem_clock_khz, o.quick ? "true" : "false");
  for (size_t i = 0; i < rs.size(); ++i) print_stat_json(rs[i], i + 1 == rs.size());
  std::printf("]}\n");
  return 0;
}
