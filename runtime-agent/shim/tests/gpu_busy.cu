// gpu_busy.cu - the offline workload of the hardware test
// (tests/runtime-agent/shim/test_gpu_hardware.py).
//
// One persistent kernel increments a counter in mapped (zero-copy) host memory as fast as
// it can until told to stop. A host thread samples that counter and records when it last
// moved, so the test can tell when the kernel stopped making progress (the channel was
// disabled) and when it resumed. Commands on stdin, one reply line each on stdout:
//   probe      -> "probe now_ns=N counter=C last_change_ns=L first_after_mark_ns=F"
//   mark T     -> forget F; F becomes the first change at or after monotonic time T
//   quit       -> stop the kernel, exit
// Build: nvcc -O2 -o build/gpu_busy tests/gpu_busy.cu
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <iostream>

static unsigned long long now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

__global__ void spin(volatile unsigned long long *counter, volatile int *stop) {
  while (!*stop) {
    *counter = *counter + 1;
    __threadfence_system();
    long long t0 = clock64();
    while (clock64() - t0 < 1000) {
    }
  }
}

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e = (x);                                                          \
    if (e != cudaSuccess) {                                                       \
      std::printf("error %s: %s\n", #x, cudaGetErrorString(e));                  \
      std::fflush(stdout);                                                        \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

int main() {
  CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
  unsigned long long *counter_h;
  int *stop_h;
  CHECK(cudaHostAlloc((void **)&counter_h, sizeof *counter_h, cudaHostAllocMapped));
  CHECK(cudaHostAlloc((void **)&stop_h, sizeof *stop_h, cudaHostAllocMapped));
  *counter_h = 0;
  *stop_h = 0;
  unsigned long long *counter_d;
  int *stop_d;
  CHECK(cudaHostGetDevicePointer((void **)&counter_d, counter_h, 0));
  CHECK(cudaHostGetDevicePointer((void **)&stop_d, stop_h, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  spin<<<1, 1, 0, s>>>(counter_d, stop_d);
  CHECK(cudaGetLastError());

  std::atomic<unsigned long long> last_change{0}, first_after{0}, mark{~0ull};
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    volatile unsigned long long *c = counter_h;
    unsigned long long prev = *c;
    while (!done.load()) {
      unsigned long long v = *c, t = now_ns();
      if (v != prev) {
        prev = v;
        last_change.store(t);
        if (t >= mark.load() && first_after.load() == 0) first_after.store(t);
      }
    }
  });
  std::printf("ready\n");
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "probe") {
      std::printf("probe now_ns=%llu counter=%llu last_change_ns=%llu first_after_mark_ns=%llu\n",
                  now_ns(), *(volatile unsigned long long *)counter_h, last_change.load(),
                  first_after.load());
    } else if (line.rfind("mark ", 0) == 0) {
      first_after.store(0);
      mark.store(std::stoull(line.substr(5)));
      std::printf("mark ok\n");
    } else if (line == "quit") {
      break;
    }
    std::fflush(stdout);
  }
  *(volatile int *)stop_h = 1;
  done.store(true);
  sampler.join();
  cudaStreamSynchronize(s);
  std::printf("bye\n");
  return 0;
}
