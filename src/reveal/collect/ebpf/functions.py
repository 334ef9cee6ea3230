"""The traced library entry points: what each one's arguments mean, and their numeric ids.

Argument positions follow the C prototypes (``cuda_runtime_api.h``, ``cuda.h``, ``nccl.h``);
bpftrace's ``argN`` is the N-th integer argument register. A ``dim3`` passed by value (as
in ``cudaLaunchKernel``) takes two registers, which is why no argument after one is used.

Enum values are the public ABI: ``cudaMemcpyKind`` (0 host→host ... 4 default) and
``ncclDataType_t`` (NCCL 2.19+: 0 int8 ... 9 bfloat16, 10 fp8 e4m3, 11 fp8 e5m2).
In the kernel an out-of-range value is clamped to one "invalid" code, so a tenant cannot
grow the maps with arbitrary keys.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Copy kinds: runtime ``cudaMemcpyKind`` codes 0..4, then our own codes for an invalid
#: kind (clamped in the kernel) and the driver's peer copies.
COPY_KINDS = ("HtoH", "HtoD", "DtoH", "DtoD", "Default", "invalid", "Peer")
COPY_KIND_INVALID = 5

#: ``ncclDataType_t`` value → (label, element size in bytes). Aliases share values
#: (ncclChar = ncclInt8, ncclHalf = ncclFloat16, ncclFloat = ncclFloat32, ...).
NCCL_DTYPES: tuple[tuple[str, int], ...] = (
    ("int8", 1), ("uint8", 1), ("int32", 4), ("uint32", 4), ("int64", 8), ("uint64", 8),
    ("float16", 2), ("float32", 4), ("float64", 8), ("bfloat16", 2),
    ("float8e4m3", 1), ("float8e5m2", 1),
)
NCCL_DTYPE_INVALID = len(NCCL_DTYPES)  # clamped code for a value NCCL does not define

#: Error codes above this are clamped to it (label ``code=other``).
ERROR_CODE_MAX = 1024

LIBRARIES = ("cudart", "cuda", "nccl")


@dataclass(frozen=True)
class TracedFunction:
    """One exported function and how to read its arguments.

    ``role``: ``call`` (count and latency only), ``memcpy`` (bytes from ``bytes_arg``; copy
    kind from ``kind_arg`` or fixed ``kind``), ``malloc`` (``ptr_arg`` is the out-pointer,
    ``bytes_arg`` the size), ``free`` (``ptr_arg`` is the device pointer), ``nccl`` (element
    count from ``bytes_arg``, ``ncclDataType_t`` from ``dtype_arg``).
    """

    name: str
    library: str  # cudart | cuda | nccl
    role: str = "call"
    bytes_arg: int | None = None
    kind_arg: int | None = None
    kind: int | None = None
    ptr_arg: int | None = None
    dtype_arg: int | None = None

    @property
    def is_launch(self) -> bool:
        """A kernel launch: the highest-rate call, where a return probe costs most."""
        return "LaunchKernel" in self.name

    @property
    def family(self) -> str:
        """Metric family: ``cuda`` (runtime and driver) or ``nccl``."""
        return "nccl" if self.library == "nccl" else "cuda"


def _memcpy_rt(name: str) -> TracedFunction:
    return TracedFunction(name, "cudart", "memcpy", bytes_arg=2, kind_arg=3)


def _memcpy_drv(name: str, kind: str, bytes_arg: int = 2) -> TracedFunction:
    return TracedFunction(name, "cuda", "memcpy", bytes_arg=bytes_arg,
                          kind=COPY_KINDS.index(kind))


def _coll(name: str, count_arg: int = 2, dtype_arg: int = 3) -> TracedFunction:
    return TracedFunction(name, "nccl", "nccl", bytes_arg=count_arg, dtype_arg=dtype_arg)


#: Every traced function; a function's id is its index here (stable within a version).
FUNCTIONS: tuple[TracedFunction, ...] = (
    # CUDA runtime (libcudart): host-side enqueue for launches and async copies.
    TracedFunction("cudaLaunchKernel", "cudart"),
    TracedFunction("cudaLaunchKernel_ptsz", "cudart"),
    TracedFunction("cudaLaunchKernelExC", "cudart"),
    TracedFunction("cudaLaunchKernelExC_ptsz", "cudart"),
    _memcpy_rt("cudaMemcpy"),
    _memcpy_rt("cudaMemcpy_ptds"),
    _memcpy_rt("cudaMemcpyAsync"),
    _memcpy_rt("cudaMemcpyAsync_ptsz"),
    TracedFunction("cudaMalloc", "cudart", "malloc", bytes_arg=1, ptr_arg=0),
    TracedFunction("cudaFree", "cudart", "free", ptr_arg=0),
    TracedFunction("cudaDeviceSynchronize", "cudart"),
    TracedFunction("cudaStreamSynchronize", "cudart"),
    TracedFunction("cudaStreamSynchronize_ptsz", "cudart"),
    TracedFunction("cudaEventSynchronize", "cudart"),
    # CUDA driver (libcuda): also sees what the runtime does on the program's behalf.
    TracedFunction("cuLaunchKernel", "cuda"),
    TracedFunction("cuLaunchKernel_ptsz", "cuda"),
    TracedFunction("cuLaunchKernelEx", "cuda"),
    TracedFunction("cuLaunchKernelEx_ptsz", "cuda"),
    _memcpy_drv("cuMemcpy", "Default"),
    _memcpy_drv("cuMemcpyAsync", "Default"),
    _memcpy_drv("cuMemcpyAsync_ptsz", "Default"),
    _memcpy_drv("cuMemcpyHtoD_v2", "HtoD"),
    _memcpy_drv("cuMemcpyDtoH_v2", "DtoH"),
    _memcpy_drv("cuMemcpyDtoD_v2", "DtoD"),
    _memcpy_drv("cuMemcpyHtoDAsync_v2", "HtoD"),
    _memcpy_drv("cuMemcpyDtoHAsync_v2", "DtoH"),
    _memcpy_drv("cuMemcpyDtoDAsync_v2", "DtoD"),
    _memcpy_drv("cuMemcpyHtoD_v2_ptds", "HtoD"),
    _memcpy_drv("cuMemcpyDtoH_v2_ptds", "DtoH"),
    _memcpy_drv("cuMemcpyDtoD_v2_ptds", "DtoD"),
    _memcpy_drv("cuMemcpyHtoDAsync_v2_ptsz", "HtoD"),
    _memcpy_drv("cuMemcpyDtoHAsync_v2_ptsz", "DtoH"),
    _memcpy_drv("cuMemcpyDtoDAsync_v2_ptsz", "DtoD"),
    _memcpy_drv("cuMemcpyPeer", "Peer", bytes_arg=4),
    _memcpy_drv("cuMemcpyPeerAsync", "Peer", bytes_arg=4),
    TracedFunction("cuMemAlloc_v2", "cuda", "malloc", bytes_arg=1, ptr_arg=0),
    TracedFunction("cuMemFree_v2", "cuda", "free", ptr_arg=0),
    # NCCL (libnccl): enqueue of collectives and point-to-point operations.
    _coll("ncclAllReduce"),
    _coll("ncclReduce"),
    _coll("ncclBroadcast"),
    _coll("ncclAllGather"),
    _coll("ncclReduceScatter"),
    _coll("ncclSend", count_arg=1, dtype_arg=2),
    _coll("ncclRecv", count_arg=1, dtype_arg=2),
    TracedFunction("ncclGroupStart", "nccl"),
    TracedFunction("ncclGroupEnd", "nccl"),
)

FUNCTION_IDS: dict[str, int] = {fn.name: i for i, fn in enumerate(FUNCTIONS)}


def functions_of(library: str) -> tuple[TracedFunction, ...]:
    """The traced functions a library kind (``cudart``, ``cuda``, ``nccl``) may export."""
    return tuple(fn for fn in FUNCTIONS if fn.library == library)


def copy_kind_label(code: int) -> str:
    return COPY_KINDS[code] if 0 <= code < len(COPY_KINDS) else "invalid"


def nccl_dtype(code: int) -> tuple[str, int | None]:
    """``(label, element bytes)`` of a clamped ``ncclDataType_t`` code (size None: invalid)."""
    if 0 <= code < len(NCCL_DTYPES):
        return NCCL_DTYPES[code]
    return "invalid", None


def error_label(code: int) -> str:
    return "other" if code >= ERROR_CODE_MAX or code < 0 else str(code)
