"""Keeps GPU 0 busy for a number of seconds with nothing but the driver (no CUDA toolkit): a
hand-written PTX kernel that does floating-point work until its clock has run a number of
cycles, launched over and over through libcuda with ctypes. Usage: python3 gpu-spin.py SECONDS.
Exits non-zero (at once) where the driver cannot be used."""

import ctypes
import sys
import time

PTX = rb"""
.version 7.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 cycles, .param .u64 out)
{
  .reg .u64 %rd<6>;
  .reg .pred %p;
  .reg .f32 %f<3>;
  ld.param.u64 %rd1, [cycles];
  mov.u64 %rd2, %clock64;
  mov.f32 %f1, 0f3F800000;
  mov.f32 %f2, 0f3F000000;
LOOP:
  fma.rn.f32 %f1, %f1, 0f3F7FFFEF, 0f38D1B717;
  fma.rn.f32 %f2, %f2, 0f3F7FFFEF, 0f38D1B717;
  fma.rn.f32 %f1, %f1, 0f3F7FFFEF, 0f38D1B717;
  fma.rn.f32 %f2, %f2, 0f3F7FFFEF, 0f38D1B717;
  mov.u64 %rd3, %clock64;
  sub.u64 %rd4, %rd3, %rd2;
  setp.lt.u64 %p, %rd4, %rd1;
  @%p bra LOOP;
  add.f32 %f1, %f1, %f2;
  ld.param.u64 %rd5, [out];
  st.global.f32 [%rd5], %f1;
  ret;
}
"""


def main() -> None:
    seconds = float(sys.argv[1])
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(status: int, what: str) -> None:
        if status != 0:
            raise SystemExit(f"{what}: CUDA error {status}")

    check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    context = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")
    module = ctypes.c_void_p()
    check(cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX + b"\0")), "cuModuleLoadData")
    kernel = ctypes.c_void_p()
    check(cuda.cuModuleGetFunction(ctypes.byref(kernel), module, b"spin"), "cuModuleGetFunction")
    out = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(out), ctypes.c_size_t(4)), "cuMemAlloc")
    cycles = ctypes.c_uint64(200_000_000)  # about 0.1 s at 2 GHz
    params = (ctypes.c_void_p * 2)(
        ctypes.cast(ctypes.byref(cycles), ctypes.c_void_p), ctypes.cast(ctypes.byref(out), ctypes.c_void_p)
    )
    launches = 0
    end = time.monotonic() + seconds
    print("spinning", flush=True)
    while time.monotonic() < end:
        check(cuda.cuLaunchKernel(kernel, 1056, 1, 1, 512, 1, 1, 0, None, params, None), "cuLaunchKernel")
        check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
        launches += 1
    print(f"busy for {seconds:.0f} s: {launches} launches", flush=True)


if __name__ == "__main__":
    main()
